/**
 * A bounded tail of a byte stream: keeps only the last `limitBytes` bytes written, so a
 * chatty task can never grow a worker's memory. `text()` decodes UTF-8 safely: a multi-byte
 * character cut in half by the bound is dropped at the front, never rendered as garbage.
 */
export const DEFAULT_OUTPUT_TAIL_BYTES = 4096;

export class OutputTail {
  readonly limitBytes: number;
  #chunks: Buffer[] = [];
  #size = 0;
  #totalBytes = 0;

  constructor(limitBytes: number = DEFAULT_OUTPUT_TAIL_BYTES) {
    if (!Number.isInteger(limitBytes) || limitBytes < 0)
      throw new RangeError(`limitBytes must be a non-negative integer, got ${limitBytes}`);
    this.limitBytes = limitBytes;
  }

  /** Bytes ever written (including those dropped). */
  get totalBytes(): number {
    return this.#totalBytes;
  }

  write(chunk: Buffer | string): void {
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    this.#totalBytes += buf.length;
    if (this.limitBytes === 0 || buf.length === 0) return;
    const kept = buf.length > this.limitBytes ? buf.subarray(buf.length - this.limitBytes) : buf;
    this.#chunks.push(Buffer.from(kept)); // copy: callers may reuse their buffers
    this.#size += kept.length;
    while (this.#size > this.limitBytes) {
      const head = this.#chunks[0]!;
      const excess = this.#size - this.limitBytes;
      if (head.length <= excess) {
        this.#chunks.shift();
        this.#size -= head.length;
      } else {
        this.#chunks[0] = head.subarray(excess);
        this.#size -= excess;
      }
    }
  }

  /** The kept bytes as text. Leading UTF-8 continuation bytes (a cut character) are skipped. */
  text(): string {
    const buf = Buffer.concat(this.#chunks, this.#size);
    let start = 0;
    while (start < buf.length && start < 3 && (buf[start]! & 0xc0) === 0x80) start++;
    return new TextDecoder("utf-8", { fatal: false }).decode(buf.subarray(start));
  }
}
