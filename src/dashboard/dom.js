/**
 * DOM building without HTML strings (the page runs under Trusted Types: no innerHTML): `h`
 * makes an element from attributes and children, text always as text nodes. Plus the time
 * formats the pages share (UTC and the browser's local time).
 */

/**
 * @param {string} tag
 * @param {Record<string, unknown>} [attrs] `on<event>` keys add listeners; false/null/undefined skip
 * @param {...unknown} children nodes, strings, numbers, arrays of them; null/false skipped
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

/** @param {Element} el @param {unknown[]} children */
export function append(el, children) {
  for (const c of children.flat(3)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** Replaces the children of `el`. @param {Element} el @param {...unknown} children */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

const LOCAL_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

/** @param {string | null | undefined} iso @returns {string} "2026-12-06 09:00:00 UTC" */
export function utc(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** @param {string | null | undefined} iso @returns {string} in the browser's time zone */
export function local(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  // (dateStyle/timeStyle cannot be combined with timeZoneName: the fields one by one.)
  return new Intl.DateTimeFormat(undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
  }).format(d);
}

/** The browser's time zone name (e.g. "Europe/Berlin"). */
export function localZone() {
  return LOCAL_ZONE;
}

/** A `<time>` element showing UTC, with the local time as its title. @param {string | null} iso */
export function time(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: local(iso) }, utc(iso));
}

/** A run status as coloured text (the colour is never the only sign). @param {string} status */
export function statusBadge(status) {
  return h("span", { class: `status status-${status}` }, status.replace("_", " "));
}

/** @param {string} path @param {Record<string, string | null | undefined>} q */
export function link(path, q = {}) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v) p.set(k, v);
  const s = p.toString();
  return `#${path}${s ? `?${s}` : ""}`;
}

/**
 * First page / next page links (the API's cursors only go forward).
 * @param {string} path @param {Record<string, string | null>} q
 * @param {string | null} cursor @param {string | null} next
 */
export function pager(path, q, cursor, next) {
  return h(
    "nav",
    { class: "pager", "aria-label": "Pages" },
    cursor ? h("a", { href: link(path, q) }, "First page") : null,
    next ? h("a", { href: link(path, { ...q, cursor: next }) }, "Next page") : null,
  );
}

/**
 * @param {string} id @param {string} label @param {Record<string, unknown>} attrs
 * @param {string} [hint]
 */
export function field(id, label, attrs, hint) {
  const input = h("input", {
    id,
    name: id,
    ...attrs,
    ...(hint ? { "aria-describedby": `${id}-hint` } : {}),
  });
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    input,
    hint ? h("p", { id: `${id}-hint`, class: "hint" }, hint) : null,
  );
}
