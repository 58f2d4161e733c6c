// Bucket bounds laid out as the simulated engines lay out theirs.

/** `count` bounds growing by `factor`, the first one `start * factor`. */
export function exponentialBounds(start: number, factor: number, count: number): number[] {
  const bounds: number[] = [];
  let bound = start;
  for (let i = 0; i < count; i++) {
    bound *= factor;
    bounds.push(bound);
  }
  return bounds;
}

/** `count` evenly spaced bounds ending at `max`. */
export function linearBounds(max: number, count: number): number[] {
  const step = max / count;
  return Array.from({ length: count }, (_, i) => step * (i + 1));
}
