/**
 * Prices and the run's spend budget, as tool dispatch sees them: every
 * billable request (a call, a batch member) is reserved before it is sent and
 * billed or released once its outcome is known (src/stores/spend-store.ts keeps
 * the ledger). A reservation the cap refuses stops the map like a tripped
 * circuit breaker: the request is never sent.
 */
import { ToolCallError } from "../../play/tool-error";
import type { AnyTool } from "../../play/types";
import { TerminalError } from "../../core/errors";

/** One billable request: the idempotency key sent with it, and what it costs. */
export interface BillableRequest {
  requestKey: string;
  toolId: string;
  provider: string;
  credits: number;
}

/** The run's ledger of billable requests (synchronous: it lives in the coordinator's storage). */
export interface SpendLedger {
  /**
   * Reserves the request's price; throws {@link SpendCapReached} when that
   * would pass the run's cap. An executor's ledger may have to ask the
   * coordinator first (it then answers a promise).
   */
  reserve(request: BillableRequest, signal?: AbortSignal): void | Promise<void>;
  /** The provider answered: the reservation is spend. */
  bill(requestKey: string): void;
  /** Not billed: the reservation is freed. */
  release(requestKey: string): void;
  /**
   * The provider billed this request and this run's receipt holds it, though
   * the invocation that sent it died before recording the bill: it is spend,
   * reserved or not (idempotent; never refused by the cap, as it is billed).
   */
  recordBilled(request: BillableRequest): void;
}

/**
 * How long one reservation waits, in all, while other attempts hold what the cap has left (SpendGrant.waitMs): they
 * bill it or give it back as they end. An attempt the coordinator gave up on keeps its grant until it reports its end
 * or the run ends, so the wait is bounded; past it the cap counts as reached.
 */
export const MAX_GRANT_WAIT_MS = 60_000;

/** How a child's refusal by its parent's cap reads (a parent that merely reused the child tells it from the others). */
export const PARENT_CAP_REFUSAL = "what its parent run's maxSpend leaves it";

/** Which cap refused: the run's `maxSpend`, the org's daily limit, or what the run's parent allotted it of its cap. */
export type CapReason = "maxSpend" | "daily" | "parent";

/** The run would pass its `maxSpend` (or the org's daily cap, or its parent's) with the next request: nothing more is sent. */
export class SpendCapReached extends TerminalError {
  /** `spent` is what was billed when the cap refused; the run's error reports what it billed in the end. */
  constructor(spent: number, maxSpend: number, reason: CapReason = "maxSpend", message = capMessage(reason, maxSpend)) {
    super("spend_cap_reached", message, { details: { spent, maxSpend } });
  }
}

function capMessage(reason: CapReason, credits: number): string {
  switch (reason) {
    case "maxSpend":
      return `the run's next provider request would pass its maxSpend of ${credits} credits; nothing more was sent. Rerun with a higher maxSpend (completed rows and billed calls are reused)`;
    case "daily":
      return `the run's next provider request would pass the org's daily spend limit of ${credits} credits (what today has billed, and what the org's other running runs hold of it); nothing more was sent. Rerun tomorrow or after raising the limit (PUT /v1/spend/limits); completed rows and billed calls are reused`;
    case "parent":
      return `the run's next provider request would pass ${PARENT_CAP_REFUSAL} (${credits} credits so far; the parent's cap counts every child's spend); nothing more was sent. Rerun the parent with a higher maxSpend (completed rows and billed calls are reused)`;
  }
}

/** What one billed request of `tool` with `input` costs, in credits (0 without a price). */
export function priceOf(tool: AnyTool, input: unknown): number {
  const price = typeof tool.price === "function" ? tool.price(input) : (tool.price ?? 0);
  if (typeof price !== "number" || !Number.isFinite(price) || price < 0) {
    throw new ToolCallError({
      code: "invalid_price",
      message: `tool ${tool.id}: its price for this input is ${String(price)}, not a finite number of credits ≥ 0`,
      retryable: false,
    });
  }
  return price;
}

/** A cap on what a run reserves and bills: its own `maxSpend`, or what the org's daily limit leaves it. */
export type SpendCap = { credits: number; reason: "maxSpend" | "parent" } | { credits: number; reason: "daily"; limit: number };
