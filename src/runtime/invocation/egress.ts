/**
 * Safe egress for plays (`ctx.fetch`): only http(s) to public hosts. Loopback,
 * private, link-local, metadata and other special-purpose addresses are
 * refused, whether written as IPv4 or IPv6 literals (in any notation the URL
 * parser accepts, and in the IPv6 forms that carry an IPv4 address) or as
 * hostnames that name them. Every redirect hop is checked again and made the
 * way browsers make it: credentials never cross to another origin. Sizes and
 * time are bounded; secret header values never reach an error message.
 *
 * A hostname is judged by its text alone: a Worker's `fetch` resolves it out
 * of sight, so a name whose DNS points at a private address is not caught,
 * except the well-known wildcard-DNS services listed below. An org that needs
 * certainty lists its hosts in `EGRESS_ALLOWLIST`.
 */
import type { SubrequestMeter } from "../../core/meter";
import { TroupeError } from "../../core/errors";
import { sendOutbound, withSendHooks } from "../../core/outbound";
import { timeoutSignal } from "../../core/time";

export class EgressError extends TroupeError {
  constructor(code: string, message: string) {
    super(code, message, { httpStatus: 400 });
  }
}

export interface EgressPolicy {
  /** When set, only these hosts (exact, or `*.example.com` for subdomains) may be fetched. */
  allowHosts: readonly string[] | null;
  maxRequestBytes: number;
  maxResponseBytes: number;
  timeoutMs: number;
  maxRedirects: number;
}

export const DEFAULT_EGRESS: EgressPolicy = {
  allowHosts: null,
  maxRequestBytes: 1024 * 1024,
  maxResponseBytes: 5 * 1024 * 1024,
  timeoutMs: 15_000,
  maxRedirects: 5,
};

const BLOCKED_NAMES =
  /^(localhost|metadata|metadata\.google\.internal|instance-data|instance-data\.ec2\.internal)$|\.localhost$|\.internal$|\.local$/;

/**
 * Public DNS services whose names (and every subdomain) resolve to loopback
 * (`localtest.me`, `lvh.me`, `vcap.me`, `localhost.direct`) or to whatever
 * address is written into the name (`127.0.0.1.nip.io`, `10-0-0-1.sslip.io`).
 * The list is deliberately short: the well-known services, not every domain
 * that could be pointed at a private address.
 */
const LOOPBACK_DNS_SUFFIXES = ["localtest.me", "lvh.me", "vcap.me", "localhost.direct", "nip.io", "sslip.io", "xip.io", "traefik.me"];

/** Why a hostname (lower case, no trailing dot) is refused, or null. */
function blockedName(host: string): string | null {
  if (BLOCKED_NAMES.test(host)) return "local or metadata name";
  if (LOOPBACK_DNS_SUFFIXES.some((suffix) => host === suffix || host.endsWith(`.${suffix}`)))
    return "name resolving to a chosen (loopback or private) address";
  return null;
}

/** IPv4 ranges that are not the public internet: [first octets as number, prefix length, label]. */
const IPV4_BLOCKS: [string, number, string][] = [
  ["0.0.0.0", 8, "unspecified"],
  ["10.0.0.0", 8, "private"],
  ["100.64.0.0", 10, "shared (CGNAT)"],
  ["127.0.0.0", 8, "loopback"],
  ["169.254.0.0", 16, "link-local/metadata"],
  ["172.16.0.0", 12, "private"],
  ["192.0.0.0", 24, "special-purpose"],
  ["192.0.2.0", 24, "documentation"],
  ["192.168.0.0", 16, "private"],
  ["198.18.0.0", 15, "benchmarking"],
  ["198.51.100.0", 24, "documentation"],
  ["203.0.113.0", 24, "documentation"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"],
];

function ipv4ToInt(ip: string): number | null {
  const parts = ip.split(".");
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) return null;
  return parts.reduce((n, p) => n * 256 + Number(p), 0);
}

/** The label of the blocked range an IPv4 address falls in, or null if it is public. */
export function blockedIpv4(ip: string): string | null {
  const n = ipv4ToInt(ip);
  if (n === null) return null;
  for (const [base, bits, label] of IPV4_BLOCKS) {
    const size = 2 ** (32 - bits);
    const start = ipv4ToInt(base)!;
    if (n >= start && n < start + size) return label;
  }
  return null;
}

/** Expands an IPv6 literal (no brackets) to eight 16-bit groups, or null. */
function ipv6Groups(ip: string): number[] | null {
  let text = ip.toLowerCase();
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const n = ipv4ToInt(v4[1]!);
    if (n === null) return null;
    text = text.slice(0, -v4[1]!.length) + `${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(":") : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const fill = halves.length === 2 ? 8 - head.length - tail.length : 0;
  const groups = [...head, ...Array(Math.max(0, fill)).fill("0"), ...tail];
  if (groups.length !== 8 || groups.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return null;
  return groups.map((g) => parseInt(g, 16));
}

function ipv4Of(high: number, low: number): string {
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
}

/**
 * The IPv4 addresses an IPv6 address stands for: a packet to it reaches them
 * through a translator or a tunnel, so it is judged by them. Empty for native IPv6.
 */
function embeddedIpv4(g: number[]): string[] {
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  const last32 = ipv4Of(g[6]!, g[7]!);
  // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d.
  if (zero(0, 5) && (g[5] === 0xffff || g[5] === 0)) return [last32];
  // IPv4-translated ::ffff:0:a.b.c.d (SIIT).
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return [last32];
  // NAT64 well-known prefix 64:ff9b::/96.
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return [last32];
  // 6to4 2002:AABB:CCDD::/48.
  if (g[0] === 0x2002) return [ipv4Of(g[1]!, g[2]!)];
  // Teredo 2001:0::/32: the server, and the client with its bits inverted.
  if (g[0] === 0x2001 && g[1] === 0) return [ipv4Of(g[2]!, g[3]!), ipv4Of(~g[6]! & 0xffff, ~g[7]! & 0xffff)];
  return [];
}

/** The label of the blocked range an IPv6 address falls in, or null if it is public. */
export function blockedIpv6(ip: string): string | null {
  const g = ipv6Groups(ip);
  if (!g) return "unparseable IPv6";
  if (g.every((x) => x === 0)) return "unspecified";
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return "loopback";
  // Local-use NAT64 (64:ff9b:1::/48) is never public, and where its IPv4 sits depends on the operator's prefix length.
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return "local-use NAT64";
  for (const ipv4 of embeddedIpv4(g)) {
    const label = blockedIpv4(ipv4);
    if (label) return `${label} (IPv4 ${ipv4} in IPv6)`;
  }
  if ((g[0]! & 0xfe00) === 0xfc00) return "unique local (private)";
  if ((g[0]! & 0xffc0) === 0xfe80) return "link-local";
  if ((g[0]! & 0xffc0) === 0xfec0) return "site-local";
  if ((g[0]! & 0xff00) === 0xff00) return "multicast";
  if (g[0] === 0x2001 && g[1] === 0xdb8) return "documentation";
  return null;
}

function hostAllowed(host: string, allow: readonly string[]): boolean {
  return allow.some((entry) => (entry.startsWith("*.") ? host.endsWith(entry.slice(1)) : host === entry));
}

/** Parses and checks a URL a play wants to fetch; throws `EgressError` naming why it is refused. */
export function checkEgressUrl(raw: string, policy: Pick<EgressPolicy, "allowHosts">): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new EgressError("egress_invalid_url", `not a URL: ${JSON.stringify(raw.slice(0, 200))}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new EgressError("egress_forbidden_scheme", `only http and https may be fetched, not ${url.protocol}`);
  if (url.username || url.password) throw new EgressError("egress_forbidden_url", "URLs with credentials in them are refused");
  // The URL parser has already normalised decimal, octal and hex IPv4 forms to dotted quads.
  const host = url.hostname.toLowerCase().replace(/\.$/, "");
  const label = host.startsWith("[") ? blockedIpv6(host.slice(1, -1)) : (blockedIpv4(host) ?? blockedName(host));
  if (label) throw new EgressError("egress_forbidden_address", `${host} is a ${label} address; plays may only fetch public hosts`);
  if (policy.allowHosts && !hostAllowed(host, policy.allowHosts)) {
    throw new EgressError("egress_host_not_allowed", `${host} is not on this org's egress allowlist`);
  }
  return url;
}

/**
 * Header names whose values are credentials: `*authorization*`, `*token*`, `*key*`, `*secret*`, `*cookie*`, and
 * `auth`, `pass`/`password`/`passphrase`, `signature`, `credential(s)`, `session(-id)` as a word of the name
 * (`X-Auth`, `X-Api-Pass`, `X-Signature`; not `X-Author`, `X-Bypass-Cache`, `X-Session-Timezone`).
 */
const SECRET_HEADER =
  /authorization|token|key|secret|cookie|(?:^|[-_])(?:auth|pass|password|passwd|passphrase|signature|credentials?)(?:$|[-_])|(?:^|[-_])session(?:[-_]?id)?$/i;

/** Whether a request header carries a credential: redacted from messages and logs, dropped on a cross-origin redirect. */
export function isSecretHeader(name: string): boolean {
  return SECRET_HEADER.test(name);
}

/** Replaces every occurrence of a secret value in `text`. */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) if (secret.length >= 4) out = out.split(secret).join("[redacted]");
  return out;
}

/** `response` with the `url` it came from and whether redirects led there, as `fetch` answers them (a new one has none). */
function answered(response: Response, url: URL, redirected: boolean): Response {
  return Object.defineProperties(response, { url: { value: url.toString() }, redirected: { value: redirected } });
}

/** The statuses that redirect (Fetch standard); another 3xx is an answer like any other. */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** The statuses whose answers carry no body (Fetch standard's "null body status"). */
export const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 204, 205, 304]);
/** Headers that describe a request body: they go with it when a redirect drops the body. */
const BODY_HEADERS = ["Content-Encoding", "Content-Language", "Content-Location", "Content-Type"];

/** One request of a redirect chain. */
interface Hop {
  url: URL;
  method: string;
  headers: Headers;
  body: RequestInit["body"];
}

/**
 * The request that follows `hop` answered `status` with a redirect to `url`,
 * made as browsers make it (Fetch standard, "HTTP-redirect fetch"): 303 turns
 * any method but GET and HEAD into a GET without body, 301 and 302 do so for
 * POST, 307 and 308 keep method and body. Leaving the origin drops every
 * credential header, for the rest of the chain.
 */
function nextHop(hop: Hop, status: number, url: URL): Hop {
  const headers = new Headers(hop.headers);
  const toGet =
    status === 303 ? hop.method !== "GET" && hop.method !== "HEAD" : (status === 301 || status === 302) && hop.method === "POST";
  if (toGet) for (const name of BODY_HEADERS) headers.delete(name);
  if (url.origin !== hop.url.origin) {
    for (const name of [...headers.keys()]) if (isSecretHeader(name)) headers.delete(name);
  }
  return toGet ? { url, method: "GET", headers, body: null } : { ...hop, url, headers };
}

/**
 * Fetches under the policy: every redirect hop re-checked and made as a
 * browser would (`nextHop`), request and response bodies bounded, a timeout,
 * and errors that name no secret header.
 */
export async function safeFetch(
  raw: string,
  init: RequestInit = {},
  policy: EgressPolicy = DEFAULT_EGRESS,
  meter?: SubrequestMeter,
): Promise<Response> {
  const secrets = [...new Headers(init.headers).entries()].filter(([name]) => isSecretHeader(name)).map(([, v]) => v);
  const body = init.body;
  if (body !== undefined && body !== null) {
    const size =
      typeof body === "string"
        ? new TextEncoder().encode(body).length
        : body instanceof ArrayBuffer
          ? body.byteLength
          : ArrayBuffer.isView(body)
            ? body.byteLength
            : null;
    if (size === null) throw new EgressError("egress_body_unsupported", "ctx.fetch bodies must be a string or bytes");
    if (size > policy.maxRequestBytes)
      throw new EgressError("egress_request_too_large", `request body is ${size} bytes; the limit is ${policy.maxRequestBytes}`);
  }
  let hop: Hop = {
    url: checkEgressUrl(raw, policy),
    method: (init.method ?? "GET").toUpperCase(),
    headers: new Headers(init.headers),
    body: body ?? null,
  };
  // Its timer is cleared when the fetch ends (an `AbortSignal.timeout` would live on, 15 s a request). Its clock
  // stops while a hop waits for one of the object's outbound slots: a wait behind the object's other requests is
  // not this site being slow.
  const timeout = timeoutSignal(policy.timeoutMs);
  const signal = init.signal ? AbortSignal.any([timeout.signal, init.signal]) : timeout.signal;
  try {
    for (let redirects = 0; ; redirects++) {
      // An outbound request of the object (each hop): under emulated platform limits it may wait for a slot.
      // Each hop is a subrequest of the invocation (counted, and refused past the platform's cap).
      if (meter) meter.fetches++;
      const response = await withSendHooks({ waiting: timeout.pause, sent: timeout.resume }, () =>
        sendOutbound(
          () => fetch(hop.url, { ...init, method: hop.method, headers: hop.headers, body: hop.body, redirect: "manual", signal }),
          signal,
        ),
      );
      const location = response.headers.get("Location");
      if (REDIRECT_STATUSES.has(response.status) && location !== null) {
        if (redirects >= policy.maxRedirects)
          throw new EgressError("egress_too_many_redirects", `more than ${policy.maxRedirects} redirects`);
        await response.body?.cancel();
        hop = nextHop(hop, response.status, checkEgressUrl(new URL(location, hop.url).toString(), policy));
        continue;
      }
      const answer = { status: response.status, statusText: response.statusText, headers: response.headers };
      // No body to bound: Content-Length then describes the resource (a HEAD's GET, a 304's cached copy), not this answer.
      if (hop.method === "HEAD" || NULL_BODY_STATUSES.has(response.status)) {
        await response.body?.cancel();
        return answered(new Response(null, answer), hop.url, redirects > 0);
      }
      return answered(new Response(await readCapped(response, policy.maxResponseBytes), answer), hop.url, redirects > 0);
    }
  } catch (error) {
    if (error instanceof EgressError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    if (signal.aborted && !init.signal?.aborted)
      throw new EgressError("egress_timeout", `fetch of ${hop.url.host} took longer than ${policy.timeoutMs} ms`);
    throw new EgressError("egress_failed", redactSecrets(`fetch of ${hop.url.host} failed: ${message}`, secrets));
  } finally {
    timeout.clear();
  }
}

async function readCapped(response: Response, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(response.headers.get("Content-Length") ?? NaN);
  if (declared > maxBytes) {
    await response.body?.cancel();
    throw new EgressError("egress_response_too_large", `response is ${declared} bytes; the limit is ${maxBytes}`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (response.body) {
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel();
        throw new EgressError("egress_response_too_large", `response is over ${maxBytes} bytes`);
      }
      chunks.push(value);
    }
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}
