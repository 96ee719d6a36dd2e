"""Image + question prompts made offline: shapes drawn with PIL, questions about them.

Deterministic for a seed, so benchmarks, tests and drafter training see the same images."""

from __future__ import annotations

import random

VISION_QUESTIONS = (
    "Describe this picture in detail.",
    "What shapes and colours do you see in this image?",
    "Write a short story inspired by this picture.",
    "What could this image be used for? Explain.",
    "Count the objects in the picture and describe each one.",
    "Describe the picture to someone who cannot see it.",
    "Which object in this image stands out the most, and why?",
    "Write a poem about this picture.",
)
# Questions no training example asks (benchmarks measure drafters trained on VISION_QUESTIONS).
HELD_OUT_QUESTIONS = (
    "What is happening in this picture?",
    "Give this image a title and explain your choice.",
    "Describe the colours in this image and the mood they create.",
    "If this picture were a painting, what style would it be? Explain.",
    "List three things you notice first in this image.",
    "Explain this image to a child.",
    "What would you change to make this picture more interesting?",
    "Write a product description for a poster of this image.",
)
COLOURS = ("red", "green", "blue", "orange", "purple", "black", "yellow", "brown")
SHAPES = ("ellipse", "rectangle", "polygon", "line")


def drawn_image(rng: random.Random, size: int = 96):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), rng.choice(("white", "lightgrey", "lightyellow", "lightblue")))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randint(0, size // 2), rng.randint(0, size // 2)
        x1, y1 = x0 + rng.randint(10, size // 2), y0 + rng.randint(10, size // 2)
        kind, colour = rng.choice(SHAPES), rng.choice(COLOURS)
        if kind == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        elif kind == "polygon":
            draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=4)
    return image


def drawn_images(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [drawn_image(rng) for _ in range(n)]


def vision_requests(n: int, seed: int = 0, held_out: bool = False) -> list[tuple[object, str]]:
    """n (image, question) pairs; questions cycle through VISION_QUESTIONS (HELD_OUT_QUESTIONS)."""
    questions = HELD_OUT_QUESTIONS if held_out else VISION_QUESTIONS
    return [(image, questions[i % len(questions)]) for i, image in enumerate(drawn_images(n, seed))]
