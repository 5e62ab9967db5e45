// Typeset the formulas pymdownx.arithmatex (generic mode) wraps in \( \) and \[ \], on every page load
// (including Material's instant navigation).
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
    ],
    ignoredClasses: ["highlight"],
    throwOnError: false,
  });
});
