"""The picture of a synthetic VQA image, drawn from its latent record (`world.Image`).

The scene fills the picture, the sky (weather, or night) its top row of grid cells; then
every secondary object, every person and every one of the main objects is drawn, each
with a tag of a fixed size in its label's marker colour (`synthetic.pictures`): in its
box where the record has one, else in a random grid cell. So a count is a count of tags,
the main objects have their colour, and the boxes of `features/grid_layout.json` hold
what they name.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from vqajax.synthetic import pictures as P
from vqajax.synthetic.vqa import world as W

_SHAPES = {"animal": "ellipse", "food": "ellipse"}  # other kinds: rounded_rectangle


def picture(img: W.Image, seed: int) -> Image.Image:
  """The picture of `img` at its size (deterministic per seed and image id)."""
  r = random.Random(f"vqajax-synthetic/{seed}/pixels/{img.image_id}")
  cw, ch = img.width / W.GRID, img.height / W.GRID
  image = Image.new("RGB", (img.width, img.height), P.SCENES[img.scene])
  draw = ImageDraw.Draw(image)
  sky = "night" if img.night else img.weather
  if sky is not None:
    draw.rectangle((0, 0, img.width, round(ch)), fill=P.SKIES[sky])

  def boxes(label: str, n: int) -> list[tuple[int, int, int, int]]:
    given = [tuple(b[1:]) for b in img.boxes if b[0] == label][:n]
    return given + [(x, y, x + 1, y + 1) for x, y in
                    ((r.randrange(W.GRID), r.randrange(W.GRID)) for _ in range(n - len(given)))]

  def thing(box, body: str, label: str, text: str, shape: str = "rounded_rectangle") -> None:
    x0, y0, x1, y1 = box[0] * cw + 0.08 * cw, box[1] * ch + 0.08 * ch, box[2] * cw - 0.08 * cw, box[3] * ch - 0.08 * ch
    fill = P.colours(body) if body else [P.marker(label)]  # a secondary object: its marker colour
    if len(fill) > 1:
      mask = Image.new("L", image.size)
      ImageDraw.Draw(mask).rounded_rectangle((x0, y0, x1, y1), radius=0.2 * min(cw, ch), fill=255)
      P.striped(image, mask, fill, max(2, round(0.12 * cw)))
    else:
      getattr(draw, shape)((x0, y0, x1, y1), fill=fill[0], **({"radius": 0.2 * min(cw, ch)} if shape != "ellipse" else {}))
    P.tag(image, ((x0 + x1) / 2, (y0 + y1) / 2), 0.84 * cw, 0.4 * ch, text, P.marker(label))

  for sec, n in img.secondaries.items():
    for box in boxes("sec:" + sec, n):
      thing(box, "", sec, sec)
  if img.person is not None:
    for box in boxes("person", min(img.people, 8)):
      thing(box, img.shirt, img.person, img.person)
  for box in boxes(img.name, img.count):
    thing(box, img.colour, img.name, img.name, _SHAPES.get(img.kind, "rounded_rectangle"))
  return image
