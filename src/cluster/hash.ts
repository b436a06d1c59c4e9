/**
 * The frozen hash of placement (version 1). FNV-1a over UTF-8 bytes, then the murmur3 32-bit
 * finaliser for avalanche. Changing this function moves every actor: that is a migration, so it
 * is versioned (`PLACEMENT_VERSION`) and pinned by golden values in the unit tests.
 */
export const PLACEMENT_VERSION = 1;

const encoder = new TextEncoder();

export function hash32(text: string): number {
  let h = 0x811c9dc5;
  // ASCII (every actor id Kairos makes) is its own UTF-8: hashed from the char codes, with no
  // encoder allocation (TextEncoder.encode here was ~8% of a scheduler's CPU in a 200,000 burst:
  // every message delivered hashes its address). Anything else goes through the encoder.
  let ascii = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) {
      ascii = false;
      break;
    }
    h ^= c;
    h = Math.imul(h, 0x01000193);
  }
  if (!ascii) {
    h = 0x811c9dc5;
    const bytes = encoder.encode(text);
    for (let i = 0; i < bytes.length; i++) {
      h ^= bytes[i]!;
      h = Math.imul(h, 0x01000193);
    }
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
