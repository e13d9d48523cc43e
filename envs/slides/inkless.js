// Makes every glyph of slide `index` transparent without moving anything (colour never affects
// layout), so that a second screenshot differs from the first exactly where text is painted.
(index) => {
  const slide = document.querySelectorAll("section.slide")[index];
  if (!slide) return 0;
  const props = [["color", "transparent"], ["-webkit-text-fill-color", "transparent"],
    ["text-shadow", "none"], ["-webkit-text-stroke-width", "0px"],
    ["text-decoration-color", "transparent"], ["caret-color", "transparent"]];
  const els = [slide, ...slide.querySelectorAll("*")];
  for (const el of els) for (const [k, v] of props) el.style.setProperty(k, v, "important");
  // Pseudo-element text (::first-line, ::first-letter) cannot take inline styles; a rule in the
  // first-declared cascade layer wins over every unlayered author rule, !important included.
  const style = document.createElement("style");
  style.id = "gymfleet-inkless";
  style.textContent = "@layer gymfleet-inkless { section.slide *::first-line, section.slide *::first-letter," +
    " section.slide::first-line { color: transparent !important; -webkit-text-fill-color: transparent !important;" +
    " text-shadow: none !important; } }";
  document.head ? document.head.prepend(style) : document.documentElement.prepend(style);
  return els.length;
}
