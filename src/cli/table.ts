/**
 * Plain-text tables for people: a header row and aligned columns separated by two spaces, no
 * borders, so `grep` and `awk` still work on them. Cells are one line: newlines and tabs become
 * spaces and a cell over its column's limit is cut with `…`.
 */

export interface Column<T> {
  header: string;
  cell(row: T): string;
  /** Longest cell shown (default 60 characters). */
  max?: number;
}

function clean(s: string, max: number): string {
  const one = s.replace(/[\u0000-\u001f\u007f]+/g, " ");
  return one.length > max ? `${one.slice(0, Math.max(1, max - 1))}…` : one;
}

/** The rows as lines (header first), each ending in a newline; nothing but the header when empty. */
export function formatTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const cells = rows.map((r) => columns.map((c) => clean(c.cell(r), c.max ?? 60)));
  const widths = columns.map((c, i) =>
    Math.max(c.header.length, ...cells.map((row) => row[i]!.length)),
  );
  const line = (row: readonly string[]): string =>
    row
      .map((v, i) => (i === row.length - 1 ? v : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd() + "\n";
  return line(columns.map((c) => c.header)) + cells.map(line).join("");
}

/** `label  value` lines with the labels aligned (a record shown on its own). */
export function formatFields(fields: readonly (readonly [string, string])[]): string {
  const w = Math.max(...fields.map(([k]) => k.length));
  return fields.map(([k, v]) => `${k.padEnd(w)}  ${v}`.trimEnd() + "\n").join("");
}
