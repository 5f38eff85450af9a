"""The picture of a synthetic VQA-AnswerTherapy image, drawn from its item's things.

The scene's colour fills the picture; each thing (grounded or a distractor, in order, so
a label printed on a product lies over it) fills its polygon with diagonal stripes of
its colour, its label's marker colour and, for a text, its word's marker colour
(`synthetic.pictures`), so that every grid cell it covers shows what it is, and carries
a tag with its word where the tag fits. A grounding polygon is exactly the drawn region.
"""

from __future__ import annotations

from PIL import Image, ImageDraw

from vqajax.synthetic import pictures as P


def picture(item) -> Image.Image:
  """The picture of a `write.Item` at its size."""
  width, height = item.width, item.height
  image = Image.new("RGB", (width, height), P.SCENES[item.scene])
  stripe = max(2, round(5 * max(width, height) / P.IMAGE_SIZE))  # 5 px at the extractor's 224
  for thing in item.things:
    mask = Image.new("L", image.size)
    ImageDraw.Draw(mask).polygon([(x * width, y * height) for x, y in thing.polygon.tolist()], fill=255)
    colours = (P.colours(thing.colour) if thing.colour else []) + [P.marker(thing.label)]
    P.striped(image, mask, colours + ([P.marker("text:" + thing.text)] if thing.text else []), stripe)
    x0, y0, x1, y1 = thing.box
    tag_width, tag_height = 0.6 * (x1 - x0) * width, min(0.25 * (y1 - y0) * height, 0.05 * height + 4)
    if tag_height >= 8:
      P.tag(image, ((x0 + x1) / 2 * width, (y0 + y1) / 2 * height), tag_width, tag_height,
            thing.text or thing.label, P.marker(thing.label))
  return image
