// Which request numbers of one session key have been opened: a sliding window, as IPsec's
// anti-replay window, so memory stays fixed however long the session runs.
import { SEALED_REPLAY_WINDOW } from "@zml/contracts";

export class ReplayWindow {
  private highest = -1;
  /** One slot per number in (highest - size, highest]: set when taken. */
  private readonly taken: Uint8Array;
  private readonly size: number;

  constructor(size = SEALED_REPLAY_WINDOW) {
    this.size = size;
    this.taken = new Uint8Array(size);
  }

  /**
   * Takes `seq` if it is new and not too far behind the highest taken; false for a replay or
   * a number that has fallen out of the window. Take before opening, so two copies in flight
   * at once cannot both pass; `release` a number whose request did not open.
   */
  take(seq: number): boolean {
    if (seq > this.highest) {
      const from = Math.max(this.highest + 1, seq - this.size + 1);
      for (let n = from; n <= seq; n++) this.taken[n % this.size] = 0;
      this.highest = seq;
    } else if (seq <= this.highest - this.size || this.taken[seq % this.size] === 1) {
      return false;
    }
    this.taken[seq % this.size] = 1;
    return true;
  }

  /** Gives a taken number back (its request did not open, so it used nothing up). */
  release(seq: number): void {
    if (seq > this.highest - this.size) this.taken[seq % this.size] = 0;
  }
}
