import { describe, expect, it } from "vitest";
import { blockedIpv6, checkEgressUrl, redactSecrets, safeFetch } from "./egress";

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
    ["not a url", "egress_invalid_url"],
  ];
  for (const [url, code] of refused) {
    it(`refuses ${url}`, () => {
      expect(() => checkEgressUrl(url, open)).toThrowError(expect.objectContaining({ code }));
    });
  }

  it("allows public hosts and addresses", () => {
    for (const url of ["https://example.com/a?b=1", "http://8.8.8.8/", "http://[2606:4700:4700::1111]/", "http://172.32.0.1/"]) {
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
    await expect(safeFetch("https://example.com/", { method: "POST", body: "x".repeat(2 * 1024 * 1024) })).rejects.toMatchObject({ code: "egress_request_too_large" });
  });

  it("redacts secret values from messages", () => {
    expect(redactSecrets("failed with token sk_live_abcdef123", ["sk_live_abcdef123"])).toBe("failed with token [redacted]");
  });
});
