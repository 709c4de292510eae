/** How much of the stored outputs one RPC answer carries (an RPC carries 32 MiB at most). */
import { outputChars, RPC_PAGE_CHARS } from "../contracts/shards";

/**
 * The outputs one answer may still carry: RPC_PAGE_CHARS of them as
 * JSON, and its first whatever its size. Full once an output did not fit.
 */
export class AnswerBudget {
  #left: number;
  #taken = false;
  #full = false;

  constructor(maxChars = RPC_PAGE_CHARS) {
    this.#left = maxChars;
  }

  get full(): boolean {
    return this.#full;
  }

  /** Counts `output` in the answer when it fits; false (and full from now on) when it does not. */
  take(output: unknown): boolean {
    const chars = outputChars(output);
    if (this.#full || (this.#taken && chars > this.#left)) {
      this.#full = true;
      return false;
    }
    this.#taken = true;
    this.#left -= chars;
    return true;
  }
}
