// Measures one slide of a deck in the page (run by render.py with page scripts disabled).
// Argument: the index of the slide to show. Every other slide gets an inline
// `display: none !important`; the page is scrolled to the origin, so the viewport is the frame.
// Returns {n_slides, scroll_w, scroll_h, texts: [...], boxes: [...], title_found}.
(index) => {
  const inkless = document.getElementById("gymfleet-inkless");
  if (inkless) inkless.remove();
  const slides = Array.from(document.querySelectorAll("section.slide"));
  slides.forEach((s, i) => {
    // Remember the deck's own inline display once, so that showing a slide restores it.
    if (s.dataset.gymfleetDisplay === undefined) {
      s.dataset.gymfleetDisplay = s.style.getPropertyValue("display") + "|" + s.style.getPropertyPriority("display");
    }
    const [value, priority] = s.dataset.gymfleetDisplay.split("|");
    if (i !== index) s.style.setProperty("display", "none", "important");
    else if (value) s.style.setProperty("display", value, priority);
    else s.style.removeProperty("display");
  });
  document.getAnimations().forEach((a) => { try { a.finish(); } catch (e) { a.cancel(); } });
  window.scrollTo(0, 0);
  const slide = slides[index];
  const W = window.innerWidth, H = window.innerHeight;
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "TITLE", "HEAD"]);

  const inter = (a, b) => {
    const x0 = Math.max(a[0], b[0]), y0 = Math.max(a[1], b[1]);
    const x1 = Math.min(a[0] + a[2], b[0] + b[2]), y1 = Math.min(a[1] + a[3], b[1] + b[3]);
    return [x0, y0, Math.max(0, x1 - x0), Math.max(0, y1 - y0)];
  };
  // The box that clips `el`'s content: the intersection of the padding boxes of every
  // ancestor (itself included) whose overflow is not visible, or that has a clip-path/clip.
  const clipOf = (el) => {
    let clip = [-1e7, -1e7, 2e7, 2e7];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const cs = getComputedStyle(e);
      const clips = cs.overflowX !== "visible" || cs.overflowY !== "visible" ||
        (cs.clipPath && cs.clipPath !== "none") || (cs.clip && cs.clip !== "auto");
      if (clips && e !== document.documentElement && e !== document.body) {
        const r = e.getBoundingClientRect();
        const bl = parseFloat(cs.borderLeftWidth) || 0, bt = parseFloat(cs.borderTopWidth) || 0;
        const box = [r.x + bl, r.y + bt, e.clientWidth || 0, e.clientHeight || 0];
        clip = inter(clip, e.clientWidth || e.clientHeight ? box : [r.x, r.y, r.width, r.height]);
      }
    }
    return clip;
  };
  const opacityOf = (el) => {
    let o = 1;
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
    return o;
  };
  const title = slide ? slide.querySelector("h1, h2") : null;

  const texts = [];
  if (slide) {
    const walker = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const text = node.data.replace(/\s+/g, " ").trim();
      const el = node.parentElement;
      if (!text || !el || SKIP.has(el.tagName)) continue;
      const cs = getComputedStyle(el);
      const range = document.createRange();
      range.selectNodeContents(node);
      const rects = Array.from(range.getClientRects())
        .filter((r) => r.width > 0 || r.height > 0)
        .map((r) => [r.x, r.y, r.width, r.height]);
      const lh = parseFloat(cs.lineHeight);
      texts.push({
        text, tag: el.tagName.toLowerCase(),
        in_title: !!(title && (title === el || title.contains(el))),
        rects, clip: clipOf(el),
        font_px: parseFloat(cs.fontSize) || 0,
        color: cs.color, visibility: cs.visibility, opacity: opacityOf(el),
        letter_spacing_px: parseFloat(cs.letterSpacing) || 0,
        word_spacing_px: parseFloat(cs.wordSpacing) || 0,
        line_height_px: Number.isFinite(lh) ? lh : null,
      });
    }
  }
  // Every element box that paints (for the frame check): its border box cut by its clip.
  const boxes = [];
  if (slide) {
    for (const el of [slide, ...slide.querySelectorAll("*")]) {
      const r = el.getBoundingClientRect();
      if (r.width <= 0 || r.height <= 0) continue;
      const cs = getComputedStyle(el);
      if (cs.visibility !== "visible" || opacityOf(el) <= 0.01) continue;
      const own = [r.x, r.y, r.width, r.height];
      const parent = el.parentElement;
      const shown = el === slide || !parent ? own : inter(own, clipOf(parent));
      if (shown[2] > 0 && shown[3] > 0) boxes.push({ tag: el.tagName.toLowerCase(), box: shown });
    }
  }
  return {
    n_slides: slides.length, width_px: W, height_px: H,
    scroll_w: document.documentElement.scrollWidth, scroll_h: document.documentElement.scrollHeight,
    title_found: !!title, texts, boxes,
  };
}
