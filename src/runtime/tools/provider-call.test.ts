import { describe, expect, it } from "vitest";
import { NO_FAULTS } from "../../clients/faults";
import { RetryBudget } from "../../core/backoff";
import { SubrequestMeter } from "../../core/meter";
import { sendOutbound, withOutbound, withSendStop, OutboundGate } from "../../core/outbound";
import { ToolCallError } from "../../play/tool-error";
import type { Pacer } from "../pacing/pacer";
import { callProvider, classifyFailure, NotSent, type ProviderCallContext } from "./provider-call";

/** A pacer that hands a slot out at once, or holds every request until `open()`. */
function pacer(held = false) {
  let open = () => {};
  const opened = held ? new Promise<void>((resolve) => (open = resolve)) : Promise.resolve();
  const fake = {
    async slot(signal: AbortSignal) {
      await Promise.race([opened, new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason)))]);
      return { release: () => {} };
    },
    async backpressure() {},
  } as unknown as Pacer;
  return { pacer: fake, open: () => open() };
}

function context(stop: AbortController, fake: Pacer): ProviderCallContext {
  return {
    toolId: "t",
    pacer: fake,
    budget: new RetryBudget({ remaining: 10 }),
    faults: NO_FAULTS,
    retry: { providerAttempts: 3, rateLimitAttempts: 3, providerRetryBaseMs: 5_000, providerRetryMaxMs: 5_000 },
    signal: stop.signal,
    meter: new SubrequestMeter(),
    log: () => {},
  };
}

describe("callProvider, stopped", () => {
  it("throws NotSent when stopped while it waits for a pacing slot: nothing of the call was sent", async () => {
    const stop = new AbortController();
    const { pacer: fake } = pacer(true);
    let sent = 0;
    const call = callProvider(context(stop, fake), async () => void sent++);
    stop.abort(new Error("wound down"));
    const error = await call.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotSent);
    expect((error as NotSent).reason).toBe(stop.signal.reason);
    expect(sent).toBe(0);
  });

  it("throws NotSent when the object's six connections refuse the request it waited for", async () => {
    const stop = new AbortController();
    const gate = new OutboundGate({ limit: 1 });
    // Its one connection is held by another request.
    await gate.acquire();
    const call = withOutbound({ caller: "Test:gate", gate }, () =>
      withSendStop(stop.signal, () => callProvider(context(stop, pacer().pacer), () => sendOutbound(async () => "sent"))),
    );
    await new Promise((resolve) => setTimeout(resolve, 10));
    stop.abort(new Error("wound down"));
    expect(await call.catch((e: unknown) => e)).toBeInstanceOf(NotSent);
  });

  it("answers a sent request's failure, not retried, when stopped after it went out: a later attempt may send it again", async () => {
    const stop = new AbortController();
    let sent = 0;
    const outcome = await callProvider(context(stop, pacer().pacer), async () => {
      sent++;
      stop.abort(new Error("wound down"));
      throw new ToolCallError({ code: "upstream_busy", message: "try later", retryable: true });
    });
    expect(outcome).toEqual({ ok: false, error: { code: "upstream_busy", message: "try later" }, retryable: true });
    expect(sent).toBe(1);
  });

  it("answers the last failure when stopped while it waits to retry", async () => {
    const stop = new AbortController();
    let sent = 0;
    const call = callProvider(context(stop, pacer().pacer), async () => {
      sent++;
      throw new ToolCallError({ code: "upstream_busy", message: "try later", retryable: true });
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    stop.abort(new Error("wound down"));
    expect(await call).toEqual({ ok: false, error: { code: "upstream_busy", message: "try later" }, retryable: true });
    expect(sent).toBe(1);
  });

  it("leaves a call whose later request the stop refused unknown: it throws the stop's reason, never a permanent failure", async () => {
    const stop = new AbortController();
    const gate = new OutboundGate({ limit: 1 });
    // A tool that posts, then polls: its poll waits for the one connection, held by another request, and the stop comes.
    const outcome = withOutbound({ caller: "Test:poll", gate }, () =>
      withSendStop(stop.signal, () =>
        callProvider(context(stop, pacer().pacer), async () => {
          await sendOutbound(async () => "posted");
          await gate.acquire();
          const poll = sendOutbound(async () => "polled");
          stop.abort(new Error("wound down"));
          return poll;
        }),
      ),
    );
    const error = await outcome.catch((e: unknown) => e);
    expect(error).toBe(stop.signal.reason);
  });
});

describe("classifyFailure", () => {
  it("takes a 429 for a rate limit even when the tool called it not retryable, and leaves other failures as the tool said", () => {
    // What `retryable: res.status >= 500` writes for a 429: the wait it asked for still paces every caller.
    const limited = classifyFailure(
      new ToolCallError({ code: "http_429", message: "slow down", retryable: false, status: 429, retryAfterMs: 2_000 }),
    );
    expect(limited).toMatchObject({ retryable: true, retry: { kind: "rate_limited", retryAfterMs: 2_000 } });
    expect(classifyFailure(new ToolCallError({ code: "rate_limited", message: "", retryable: false }))).toMatchObject({
      retry: { kind: "rate_limited", retryAfterMs: null },
    });
    expect(
      classifyFailure(new ToolCallError({ code: "http_404", message: "", retryable: false, status: 404, retryAfterMs: 1_000 })),
    ).toMatchObject({
      retryable: false,
      retry: { kind: "permanent" },
    });
    expect(
      classifyFailure(new ToolCallError({ code: "http_503", message: "", retryable: true, status: 503, retryAfterMs: 1_000 })),
    ).toMatchObject({
      retry: { kind: "rate_limited", retryAfterMs: 1_000 },
    });
  });
});
