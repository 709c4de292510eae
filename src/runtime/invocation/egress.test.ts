import { afterEach, describe, expect, it, vi } from "vitest";
import { OutboundGate, withOutbound } from "../../core/outbound";
import { blockedIpv6, checkEgressUrl, DEFAULT_EGRESS, isSecretHeader, redactSecrets, safeFetch } from "./egress";

const open = { allowHosts: null };

describe("checkEgressUrl refuses every forbidden address class", () => {
  const refused: [string, string][] = [
    ["ftp://example.com/x", "egress_forbidden_scheme"],
    ["file:///etc/passwd", "egress_forbidden_scheme"],
    ["http://user:pw@example.com/", "egress_forbidden_url"],
    ["http://127.0.0.1/", "egress_forbidden_address"],
    ["http://127.1.2.3:8787/", "egress_forbidden_address"],
    ["http://2130706433/", "egress_forbidden_address"], // decimal 127.0.0.1
    ["http://0x7f000001/", "egress_forbidden_address"], // hex
    ["http://0177.0.0.1/", "egress_forbidden_address"], // octal
    ["http://0.0.0.0/", "egress_forbidden_address"],
    ["http://10.1.2.3/", "egress_forbidden_address"],
    ["http://172.16.0.1/", "egress_forbidden_address"],
    ["http://172.31.255.255/", "egress_forbidden_address"],
    ["http://192.168.1.1/", "egress_forbidden_address"],
    ["http://100.64.0.1/", "egress_forbidden_address"],
    ["http://169.254.169.254/latest/meta-data/", "egress_forbidden_address"],
    ["http://224.0.0.1/", "egress_forbidden_address"],
    ["http://255.255.255.255/", "egress_forbidden_address"],
    ["http://[::1]/", "egress_forbidden_address"],
    ["http://[::]/", "egress_forbidden_address"],
    ["http://[::ffff:127.0.0.1]/", "egress_forbidden_address"],
    ["http://[::ffff:169.254.169.254]/", "egress_forbidden_address"],
    ["http://[64:ff9b::10.0.0.1]/", "egress_forbidden_address"],
    ["http://[fc00::1]/", "egress_forbidden_address"],
    ["http://[fd00:ec2::254]/", "egress_forbidden_address"],
    ["http://[fe80::1]/", "egress_forbidden_address"],
    ["http://[ff02::1]/", "egress_forbidden_address"],
    ["http://localhost/", "egress_forbidden_address"],
    ["http://LOCALHOST./", "egress_forbidden_address"],
    ["http://api.localhost/", "egress_forbidden_address"],
    ["http://metadata.google.internal/", "egress_forbidden_address"],
    ["http://printer.local/", "egress_forbidden_address"],
    // IPv6 forms that carry an IPv4 address: IPv4-translated, NAT64 (well-known and local-use), 6to4, Teredo.
    ["http://[::ffff:0:7f00:1]/", "egress_forbidden_address"],
    ["http://[::ffff:0:10.0.0.1]/", "egress_forbidden_address"],
    ["http://[64:ff9b::7f00:1]/", "egress_forbidden_address"],
    ["http://[64:ff9b:1::7f00:1]/", "egress_forbidden_address"],
    ["http://[64:ff9b:1:8:8:8:8:8]/", "egress_forbidden_address"],
    ["http://[2002:7f00:1::]/", "egress_forbidden_address"],
    ["http://[2002:a9fe:a9fe::1]/", "egress_forbidden_address"],
    ["http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "egress_forbidden_address"], // Teredo, client 127.0.0.1
    // Public wildcard-DNS names that resolve to loopback or to any address written into them.
    ["http://localtest.me/", "egress_forbidden_address"],
    ["http://api.localtest.me/", "egress_forbidden_address"],
    ["http://127.0.0.1.nip.io/", "egress_forbidden_address"],
    ["http://10-0-0-1.sslip.io/", "egress_forbidden_address"],
    ["http://x.xip.io/", "egress_forbidden_address"],
    ["http://LVH.ME./", "egress_forbidden_address"],
    ["not a url", "egress_invalid_url"],
  ];
  for (const [url, code] of refused) {
    it(`refuses ${url}`, () => {
      expect(() => checkEgressUrl(url, open)).toThrowError(expect.objectContaining({ code }));
    });
  }

  it("allows public hosts and addresses", () => {
    const allowed = [
      "https://example.com/a?b=1",
      "http://8.8.8.8/",
      "http://[2606:4700:4700::1111]/",
      "http://172.32.0.1/",
      "http://[64:ff9b::808:808]/", // NAT64 of 8.8.8.8
      "http://[2002:808:808::1]/", // 6to4 of 8.8.8.8
      "http://[::ffff:0:808:808]/",
      "https://notnip.io/",
      "https://nip.io.example.com/",
    ];
    for (const url of allowed) {
      expect(checkEgressUrl(url, open).href).toBe(new URL(url).href);
    }
    expect(blockedIpv6("2606:4700::1")).toBeNull();
  });

  it("enforces an org allowlist, with subdomain wildcards", () => {
    const policy = { allowHosts: ["api.example.com", "*.data.example.org"] };
    expect(checkEgressUrl("https://api.example.com/", policy).host).toBe("api.example.com");
    expect(checkEgressUrl("https://x.data.example.org/", policy).host).toBe("x.data.example.org");
    expect(() => checkEgressUrl("https://example.com/", policy)).toThrowError(expect.objectContaining({ code: "egress_host_not_allowed" }));
  });
});

describe("safeFetch", () => {
  it("refuses before sending anything, and bounds request bodies", async () => {
    await expect(safeFetch("http://127.0.0.1:8787/v1/runs")).rejects.toMatchObject({ code: "egress_forbidden_address" });
    await expect(safeFetch("https://example.com/", { method: "POST", body: "x".repeat(2 * 1024 * 1024) })).rejects.toMatchObject({
      code: "egress_request_too_large",
    });
  });

  it("redacts secret values from messages", () => {
    expect(redactSecrets("failed with token sk_live_abcdef123", ["sk_live_abcdef123"])).toBe("failed with token [redacted]");
  });
});

/** A stand-in for the network: answers each request with the next reply and records what was sent. */
function fakeNetwork(replies: Response[]) {
  const sent: { url: string; method: string; headers: Record<string, string>; body: string | null }[] = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const request = new Request(input, init);
    sent.push({
      url: request.url,
      method: request.method,
      headers: Object.fromEntries(request.headers),
      body: request.body ? await request.text() : null,
    });
    const reply = replies.shift();
    if (!reply) throw new Error(`unexpected request to ${request.url}`);
    return reply;
  });
  return sent;
}

const redirect = (status: number, location: string) => new Response(null, { status, headers: { Location: location } });

describe("safeFetch follows redirects as browsers do", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const credentials = {
    Authorization: "Bearer sk_live_abcdef123456",
    Cookie: "session=s3cr3t",
    "X-Api-Key": "key-123456",
    "X-Auth-Token": "tok-123456",
    "X-Client-Secret": "shh-123456",
  };
  const post = { method: "POST", body: '{"q":1}', headers: { ...credentials, "Content-Type": "application/json", "X-Trace": "t-1" } };

  it("re-sends a POST answered 303 to another origin as a GET, without its body or credentials", async () => {
    const sent = fakeNetwork([redirect(303, "https://elsewhere.example/done"), new Response("ok")]);
    const res = await safeFetch("https://api.example.com/submit", post);
    expect(await res.text()).toBe("ok");
    // Answered as fetch answers: where it came from after the redirect, and that it was redirected.
    expect([res.url, res.redirected]).toEqual(["https://elsewhere.example/done", true]);
    expect(sent[0]).toMatchObject({
      method: "POST",
      body: '{"q":1}',
      headers: expect.objectContaining({ authorization: credentials.Authorization, cookie: credentials.Cookie }),
    });
    expect(sent[1]).toEqual({ url: "https://elsewhere.example/done", method: "GET", body: null, headers: { "x-trace": "t-1" } });
  });

  it("turns a POST answered 301 or 302 into a GET without body, and keeps credentials on the same origin", async () => {
    for (const status of [301, 302]) {
      const sent = fakeNetwork([redirect(status, "/moved"), new Response("ok")]);
      await safeFetch("https://api.example.com/submit", post);
      expect(sent[1]).toMatchObject({ url: "https://api.example.com/moved", method: "GET", body: null });
      expect(sent[1]!.headers).toMatchObject({ authorization: credentials.Authorization, "x-api-key": credentials["X-Api-Key"] });
      expect(sent[1]!.headers).not.toHaveProperty("content-type");
      vi.restoreAllMocks();
    }
  });

  it("keeps method and body on 307 and 308, dropping credentials only across origins", async () => {
    const sent = fakeNetwork([
      redirect(307, "https://api.example.com/again"),
      redirect(308, "https://elsewhere.example/final"),
      new Response("ok"),
    ]);
    await safeFetch("https://api.example.com/submit", post);
    expect(sent[1]).toMatchObject({
      method: "POST",
      body: '{"q":1}',
      headers: expect.objectContaining({ authorization: credentials.Authorization }),
    });
    expect(sent[2]).toEqual({
      url: "https://elsewhere.example/final",
      method: "POST",
      body: '{"q":1}',
      headers: { "content-type": "application/json", "x-trace": "t-1" },
    });
  });

  it("does not restore dropped credentials when a later hop returns to the first origin", async () => {
    const sent = fakeNetwork([
      redirect(302, "https://elsewhere.example/hop"),
      redirect(302, "https://api.example.com/back"),
      new Response("ok"),
    ]);
    await safeFetch("https://api.example.com/start", { headers: credentials });
    expect(sent[2]).toEqual({ url: "https://api.example.com/back", method: "GET", body: null, headers: {} });
  });

  it("checks every hop's address and returns a 3xx that is not a redirect as it is", async () => {
    const sent = fakeNetwork([redirect(302, "http://127.0.0.1.nip.io/admin")]);
    await expect(safeFetch("https://api.example.com/", { headers: credentials })).rejects.toMatchObject({
      code: "egress_forbidden_address",
    });
    expect(sent).toHaveLength(1);
    vi.restoreAllMocks();
    fakeNetwork([redirect(304, "https://elsewhere.example/")]);
    const notModified = await safeFetch("https://api.example.com/");
    expect([notModified.status, notModified.url, notModified.redirected]).toEqual([304, "https://api.example.com/", false]);
  });
});

describe("safeFetch's response size limit", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const large = String(50 * 1024 * 1024);

  it("refuses a body past the limit, declared or streamed, saying so", async () => {
    fakeNetwork([new Response("x", { headers: { "Content-Length": large } })]);
    await expect(safeFetch("https://api.example.com/big.csv")).rejects.toMatchObject({
      code: "egress_response_too_large",
      message: `response is ${large} bytes; the limit is ${DEFAULT_EGRESS.maxResponseBytes}`,
    });
    fakeNetwork([new Response(new Uint8Array(DEFAULT_EGRESS.maxResponseBytes + 1))]);
    await expect(safeFetch("https://api.example.com/big.csv")).rejects.toMatchObject({ code: "egress_response_too_large" });
  });

  it("answers a HEAD, a 304 and a 204 with their headers and no body, whatever Content-Length says of the resource", async () => {
    fakeNetwork([
      new Response(null, { headers: { "Content-Length": large, ETag: '"v1"' } }),
      new Response(null, { status: 304, headers: { "Content-Length": large, ETag: '"v1"' } }),
      new Response(null, { status: 204 }),
    ]);
    const head = await safeFetch("https://api.example.com/big.csv", { method: "HEAD" });
    expect([head.status, head.headers.get("Content-Length"), head.headers.get("ETag"), head.body]).toEqual([200, large, '"v1"', null]);
    const unchanged = await safeFetch("https://api.example.com/big.csv", { headers: { "If-None-Match": '"v1"' } });
    expect([unchanged.status, unchanged.headers.get("ETag"), unchanged.body]).toEqual([304, '"v1"', null]);
    const deleted = await safeFetch("https://api.example.com/rows/1", { method: "DELETE" });
    expect([deleted.status, deleted.body]).toEqual([204, null]);
  });
});

describe("safeFetch's timeout", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** A network that answers only when the request is aborted, with its reason. */
  function silentNetwork() {
    vi.spyOn(globalThis, "fetch").mockImplementation(
      (_input, init) =>
        new Promise((_, reject) => {
          const signal = init?.signal;
          signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
        }),
    );
  }

  it("stops a request not answered within the policy's time, saying so, and not one the caller stopped", async () => {
    silentNetwork();
    await expect(safeFetch("https://api.example.com/slow", {}, { ...DEFAULT_EGRESS, timeoutMs: 30 })).rejects.toMatchObject({
      code: "egress_timeout",
      message: expect.stringContaining("longer than 30 ms"),
    });
    const caller = new AbortController();
    const stopped = safeFetch("https://api.example.com/slow", { signal: caller.signal }, { ...DEFAULT_EGRESS, timeoutMs: 60_000 });
    caller.abort(new Error("cancelled"));
    await expect(stopped).rejects.toMatchObject({ code: "egress_failed" });
  });

  it("does not count a wait for one of the object's outbound slots", async () => {
    vi.useFakeTimers();
    try {
      // Each request is answered 100 ms after it is sent; one slot, so the second waits 100 ms for the first.
      vi.spyOn(globalThis, "fetch").mockImplementation(
        (_input, init) =>
          new Promise((resolve, reject) => {
            const timer = setTimeout(() => resolve(new Response("ok")), 100);
            init?.signal?.addEventListener("abort", () => (clearTimeout(timer), reject(init.signal!.reason)), { once: true });
          }),
      );
      const policy = { ...DEFAULT_EGRESS, timeoutMs: 150 };
      const [first, second] = withOutbound({ caller: "Test:egress", gate: new OutboundGate({ limit: 1 }) }, () => [
        safeFetch("https://api.example.com/a", {}, policy),
        safeFetch("https://api.example.com/b", {}, policy),
      ]);
      await vi.advanceTimersByTimeAsync(200);
      // The second was answered 200 ms after it was asked for, 100 ms after it was sent: within its 150 ms.
      expect(await (await first).text()).toBe("ok");
      expect(await (await second).text()).toBe("ok");
    } finally {
      vi.useRealTimers();
    }
  });

  it("leaves no timer behind a request that was answered", async () => {
    vi.useFakeTimers();
    try {
      vi.spyOn(globalThis, "fetch").mockImplementation(async () => new Response("ok"));
      const res = await safeFetch("https://api.example.com/fast");
      expect(await res.text()).toBe("ok");
      // Its timer is cleared once it is answered: one left running would hold the request's signal for the full 15 s.
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("isSecretHeader", () => {
  it("takes credential headers by name, common vendor spellings included, and leaves the others", () => {
    for (const name of [
      "Authorization",
      "X-Auth",
      "X-Api-Key",
      "X-Api-Pass",
      "X-Signature",
      "X-Amz-Security-Token",
      "Cookie",
      "X-Session-Id",
      "X-Client-Credential",
    ])
      expect(isSecretHeader(name), name).toBe(true);
    for (const name of [
      "Accept",
      "Content-Type",
      "User-Agent",
      "X-Request-Id",
      "X-Author",
      "X-Bypass-Cache",
      "X-Passthrough",
      "X-Session-Timezone",
    ])
      expect(isSecretHeader(name), name).toBe(false);
  });
});
