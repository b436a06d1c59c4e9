/**
 * The dashboard's colours (src/dashboard/style.css) keep text readable: every pair of text and
 * background the stylesheet uses has a WCAG 2 contrast ratio of at least 4.5:1. The colours are
 * read from the stylesheet itself, so changing one there is checked here.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const css = readFileSync(new URL("../../../src/dashboard/style.css", import.meta.url), "utf8");

/** `--name: #rrggbb;` in :root. */
function variable(name: string): string {
  const m = new RegExp(`--${name}:\\s*(#[0-9a-fA-F]{6});`).exec(css);
  assert.ok(m, `--${name} is not a #rrggbb colour in style.css`);
  return m[1]!;
}

/** The first `#rrggbb` of a property inside the rule whose selector list starts with `sel`. */
function ruleColour(sel: string, prop: string): string {
  const at = css.indexOf(`${sel} {`);
  assert.ok(at >= 0, `no rule ${sel}`);
  const body = css.slice(at, css.indexOf("}", at));
  const m = new RegExp(`\\n\\s*${prop}:[^;]*?(#[0-9a-fA-F]{6})`).exec(body);
  assert.ok(m, `no ${prop} colour in ${sel}`);
  return m[1]!;
}

function luminance(hex: string): number {
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  const [r, g, b] = c.map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
}

function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi! + 0.05) / (lo! + 0.05);
}

describe("dashboard colours", () => {
  it("keep text at 4.5:1 or more against its background", () => {
    const bg = variable("bg");
    const panel = variable("panel");
    const pairs: [string, string, string][] = [
      ["text", variable("fg"), bg],
      ["muted text", variable("muted"), bg],
      ["muted text on a panel", variable("muted"), panel],
      ["table header", variable("fg"), panel],
      ["links", variable("accent"), bg],
      ["succeeded", variable("ok"), bg],
      ["failed", variable("danger"), bg],
      ["running", variable("warn"), bg],
      ["button text", "#ffffff", variable("accent")],
      ["danger button text", "#ffffff", variable("danger")],
      ["header text", "#ffffff", ruleColour(".top", "background")],
      ["error text", variable("danger"), ruleColour(".alert", "background")],
    ];
    for (const [what, fg, back] of pairs) {
      const r = contrast(fg, back);
      assert.ok(r >= 4.5, `${what}: ${fg} on ${back} is ${r.toFixed(2)}:1`);
    }
  });

  it("measures contrast as WCAG does", () => {
    assert.equal(contrast("#000000", "#ffffff").toFixed(1), "21.0");
    assert.equal(contrast("#777777", "#ffffff").toFixed(2), "4.48");
  });
});
