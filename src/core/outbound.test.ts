import { describe, expect, it } from "vitest";
import { OutboundGate, sendOutbound, withOutbound, withSendHooks, withSendStop } from "./outbound";

/** Lets every queued microtask and timer of this turn run. */
const settle = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

describe("OutboundGate", () => {
  it("admits up to its limit at once and hands freed slots to waiters in arrival order", async () => {
    const gate = new OutboundGate({ limit: 2 });
    const order: string[] = [];
    const take = (name: string) =>
      gate.acquire().then((release) => {
        order.push(name);
        return release;
      });
    const [a, b] = await Promise.all([take("a"), take("b")]);
    const rest = ["c", "d", "e"].map(take);
    await settle();
    expect(order).toEqual(["a", "b"]);
    expect([gate.inFlight, gate.waiting]).toEqual([2, 3]);

    b();
    await settle();
    expect(order).toEqual(["a", "b", "c"]);
    a();
    const c = await rest[0]!;
    c();
    await settle();
    expect(order).toEqual(["a", "b", "c", "d", "e"]);
    expect([gate.inFlight, gate.waiting]).toEqual([2, 0]);
    for (const release of await Promise.all(rest.slice(1))) release();
    expect(gate.inFlight).toBe(0);
  });

  it("lets a waiter whose signal aborts leave the queue holding nothing, and the next one take its place", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const first = await gate.acquire();
    const controller = new AbortController();
    const abandoned = gate.acquire(controller.signal);
    const next = gate.acquire();
    controller.abort(new Error("cancelled"));
    await expect(abandoned).rejects.toThrow("cancelled");
    expect(gate.waiting).toBe(1);

    first();
    (await next)();
    expect([gate.inFlight, gate.waiting]).toEqual([0, 0]);
    await expect(gate.acquire(AbortSignal.abort(new Error("too late")))).rejects.toThrow("too late");
    expect(gate.inFlight).toBe(0);
  });

  it("frees a slot however the request settles, and a release called twice frees it once", async () => {
    const gate = new OutboundGate({ limit: 1 });
    await expect(gate.hold(() => Promise.reject(new Error("connection reset")))).rejects.toThrow("connection reset");
    expect(gate.inFlight).toBe(0);

    const controller = new AbortController();
    const request = gate.hold(
      () => new Promise((_, reject) => controller.signal.addEventListener("abort", () => reject(controller.signal.reason))),
      controller.signal,
    );
    await settle();
    expect(gate.inFlight).toBe(1);
    controller.abort(new Error("aborted in flight"));
    await expect(request).rejects.toThrow("aborted in flight");
    expect(gate.inFlight).toBe(0);

    const release = await gate.acquire();
    const waiting = [gate.acquire(), gate.acquire()];
    release();
    release();
    await settle();
    expect([gate.inFlight, gate.waiting]).toEqual([1, 1]);
    (await waiting[0]!)();
    (await waiting[1]!)();
    expect(gate.inFlight).toBe(0);
  });

  it("gives back unused a slot granted in the same turn its waiter's signal aborted", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const first = await gate.acquire();
    const controller = new AbortController();
    let sent = false;
    const request = gate.hold(async () => {
      sent = true;
    }, controller.signal);
    first();
    controller.abort(new Error("cancelled"));
    await expect(request).rejects.toThrow("cancelled");
    expect(sent).toBe(false);
    expect(gate.inFlight).toBe(0);
  });

  it("refuses a limit that is not a positive integer", () => {
    expect(() => new OutboundGate({ limit: 0 })).toThrow(RangeError);
    expect(() => new OutboundGate({ limit: 1.5 })).toThrow(RangeError);
  });
});

describe("sendOutbound", () => {
  it("passes straight through, naming nobody, outside any object's outbound", async () => {
    expect(await sendOutbound(async (caller) => caller)).toBeNull();
  });

  it("without a gate (production, where the platform limits) names the caller and never waits", async () => {
    let inFlight = 0;
    let peak = 0;
    const callers = await withOutbound({ caller: "Test:unlimited", gate: null }, () =>
      Promise.all(
        Array.from({ length: 10 }, () =>
          sendOutbound(async (caller) => {
            peak = Math.max(peak, ++inFlight);
            await settle();
            inFlight--;
            return caller;
          }),
        ),
      ),
    );
    expect(new Set(callers)).toEqual(new Set(["Test:unlimited"]));
    expect(peak).toBe(10);
  });

  it("takes the object's gate and names it, from timers the object's work started too", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const holder = await gate.acquire();
    const later = withOutbound(
      { caller: "Test:timer", gate },
      () => new Promise<string | null>((resolve) => setTimeout(() => resolve(sendOutbound(async (caller) => caller)), 0)),
    );
    await settle();
    expect(gate.waiting).toBe(1);
    holder();
    expect(await later).toBe("Test:timer");
    expect(gate.inFlight).toBe(0);
  });

  it("never sends a request whose stop aborted while it waited for a slot, nor one asked for after", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const holder = await gate.acquire();
    const stop = new AbortController();
    const sent: string[] = [];
    const queued = withOutbound({ caller: "Test:stop", gate }, () =>
      withSendStop(stop.signal, () => sendOutbound(async () => sent.push("queued"))),
    );
    await settle();
    expect(gate.waiting).toBe(1);
    stop.abort(new Error("leases lost"));
    await expect(queued).rejects.toThrow("leases lost");
    expect(gate.waiting).toBe(0);
    holder();
    // Without a gate (production) too: nothing starts once the stop aborted.
    const ungated = withOutbound({ caller: "Test:stop", gate: null }, () =>
      withSendStop(stop.signal, () => sendOutbound(async () => sent.push("ungated"))),
    );
    await expect(ungated).rejects.toThrow("leases lost");
    expect(sent).toEqual([]);
    expect(gate.inFlight).toBe(0);
  });

  it("leaves a request already sent to its own signal when its stop aborts", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const stop = new AbortController();
    let answer!: (value: string) => void;
    const inFlight = withOutbound({ caller: "Test:sent", gate }, () =>
      withSendStop(stop.signal, () => sendOutbound(() => new Promise<string>((resolve) => (answer = resolve)))),
    );
    await settle();
    expect(gate.inFlight).toBe(1);
    stop.abort(new Error("cancelled"));
    answer("billed");
    expect(await inFlight).toBe("billed");
    expect(gate.inFlight).toBe(0);
  });

  it("tells the hooks around a request when it waits for a slot and when it goes out, outermost first", async () => {
    const gate = new OutboundGate({ limit: 1 });
    const heard: string[] = [];
    const send = (name: string) =>
      withOutbound({ caller: "Test:hooks", gate }, () =>
        withSendHooks({ waiting: () => heard.push(`outer waits ${name}`), sent: () => heard.push(`outer sends ${name}`) }, () =>
          withSendHooks({ waiting: () => heard.push(`inner waits ${name}`), sent: () => heard.push(`inner sends ${name}`) }, () =>
            sendOutbound(async () => heard.push(`sent ${name}`)),
          ),
        ),
      );
    const holder = await gate.acquire();
    const queued = send("a");
    await settle();
    expect(heard).toEqual(["outer waits a", "inner waits a"]);
    holder();
    await queued;
    expect(heard.slice(2)).toEqual(["outer sends a", "inner sends a", "sent a"]);

    // A free slot: nothing waits. A `sent` that throws refuses the request; the hooks inside it hear nothing.
    heard.length = 0;
    await send("b");
    expect(heard).toEqual(["outer sends b", "inner sends b", "sent b"]);
    const refused = withOutbound({ caller: "Test:hooks", gate }, () =>
      withSendHooks(
        {
          sent: () => {
            throw new Error("Too many subrequests.");
          },
        },
        () => withSendHooks({ sent: () => heard.push("inner sends c") }, () => sendOutbound(async () => heard.push("sent c"))),
      ),
    );
    await expect(refused).rejects.toThrow("Too many subrequests.");
    expect(heard.slice(3)).toEqual([]);
    expect(gate.inFlight).toBe(0);
  });
});
