// See docs/page.md, "Good section" and docs/page.md ("Lead-in"): both exist.
// docs/page.md, "Missing section" does not; docs/absent.md is no page.
