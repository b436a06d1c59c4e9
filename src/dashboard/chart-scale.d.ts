/** Types of chart-scale.js (plain JS: the browser loads it as it is; Node tests import it). */
export interface Box {
  left: number;
  top: number;
  right: number;
  bottom: number;
}
export function niceCeil(x: number): number;
export function plotBox(width: number, height: number): Box;
export function slotX(box: Box, i: number, n: number): number;
export function valueY(box: Box, v: number, max: number): number;
export function lineSegments(values: (number | null)[], box: Box, max: number): string[];
export function bars(
  values: (number | null)[],
  box: Box,
  max: number,
): { i: number; x: number; y: number; width: number; height: number }[];
export function formatSeconds(s: number | null): string;
export function formatCount(n: number | null): string;
export function peak(values: (number | null)[]): { i: number; value: number } | undefined;
