/** Types of cron-words.js (plain JS: the browser loads it as it is; Node tests import it). */
export function listWords(items: string[]): string;
export function cronInWords(expr: string): string;
export function scheduleInWords(
  schedule: { cron: string; time_zone: string } | { at: string },
): string;
