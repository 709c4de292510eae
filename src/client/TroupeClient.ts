/**
 * The typed client of Troupe's HTTP API (docs/api.md), for Node ≥ 22 and
 * browsers alike: it uses only `fetch`, `WebSocket` and web streams, each
 * replaceable through the constructor's options.
 */
// Types only: the request schemas stay on the server's side of the wire, and zod out of the client's bundle.
import type { RerunRequest, StartRun } from "../api/contract.ts";
import type {
  DatasetPage,
  EventPage,
  Estimate,
  LedgerEvent,
  LiveMessage,
  PlayList,
  RerunStarted,
  RunCancelled,
  RunList,
  RunStarted,
  RunView,
  MultipartUploadStarted,
  ReadyUpload,
  SignalDelivered,
  UploadList,
  UploadPartReceived,
  UploadView,
} from "../api/responses.ts";
import { TroupeApiError, errorOf } from "./errors.ts";
import { liveEvents, type LiveEventsOptions } from "./live-events.ts";

/** Where the client connects when no `baseUrl` is given: `npm start`'s local server. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8787";
/** The token local development accepts when `API_TOKENS` is unset. */
export const DEFAULT_TOKEN = "dev-token";

export interface TroupeClientOptions {
  /** The server, e.g. `https://troupe.example.workers.dev`; default `http://127.0.0.1:8787`. */
  baseUrl?: string;
  /** A token of `API_TOKENS`; default `dev-token`. */
  token?: string;
  /** The `fetch` to use (tests, proxies); default the global one. */
  fetch?: typeof fetch;
  /** The `WebSocket` constructor for {@link TroupeClient.events}; default the global one. */
  WebSocket?: typeof WebSocket;
}

/** What {@link TroupeClient.events} takes: `after`, `signal` and `heartbeatSeconds`. */
export type EventsOptions = Omit<LiveEventsOptions, "reconnect">;

type JsonRequest = { json?: unknown; body?: BodyInit; headers?: Record<string, string> };

/**
 * One org's view of a Troupe server: runs, datasets, live events, signals.
 * Every method throws a {@link TroupeApiError} for an error answer (with the
 * API's `code`) or an unreachable server (`status` 0).
 *
 * @example
 * const troupe = new TroupeClient({ baseUrl: "http://127.0.0.1:8787", token: "dev-token" });
 * const { runId } = await troupe.submit({ play: "demo-enrich", input: { csv } });
 * for await (const message of troupe.events(runId)) console.log(message.type);
 * for await (const row of troupe.rows(runId, "leads")) console.log(row.email);
 */
export class TroupeClient {
  readonly baseUrl: string;
  #token: string;
  #fetch: typeof fetch;
  #WebSocket: typeof WebSocket | undefined;

  constructor(options: TroupeClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    this.#token = options.token ?? DEFAULT_TOKEN;
    // A browser's fetch must be called with the global as `this`: never store it unbound.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#WebSocket = options.WebSocket;
  }

  /** `GET /v1/plays`: the plays this org can run. */
  plays(): Promise<PlayList> {
    return this.#json("GET", "/v1/plays");
  }

  /**
   * `POST /v1/runs`: starts a run. With `idempotencyKey`, submitting the same
   * request again returns the same run (a different request with the key is a 409).
   */
  submit(body: StartRun, options: { idempotencyKey?: string } = {}): Promise<RunStarted> {
    return this.#json("POST", "/v1/runs", { json: body, headers: idempotency(options.idempotencyKey) });
  }

  /** `GET /v1/runs/<runId>`: status, progress per map, result, error, usage. */
  get(runId: string): Promise<RunView> {
    return this.#json("GET", runPath(runId));
  }

  /** `GET /v1/runs`: the org's runs, newest first, a page at a time (`nextCursor` null on the last). */
  list(options: { limit?: number; cursor?: string } = {}): Promise<RunList> {
    return this.#json("GET", `/v1/runs${query({ limit: options.limit, cursor: options.cursor })}`);
  }

  /** `POST /v1/runs/<runId>/cancel`: no new provider calls; the run ends `cancelled`. */
  cancel(runId: string): Promise<RunCancelled> {
    return this.#json("POST", `${runPath(runId)}/cancel`);
  }

  /** `POST /v1/runs/<runId>/rerun`: the ended run's play and input as a new run. */
  rerun(runId: string, body: RerunRequest = {}, options: { idempotencyKey?: string } = {}): Promise<RerunStarted> {
    return this.#json("POST", `${runPath(runId)}/rerun`, { json: body, headers: idempotency(options.idempotencyKey) });
  }

  /**
   * `POST /v1/runs/<runId>/signals/<eventKey>`: delivers `data` to the play's
   * `ctx.waitForEvent(eventKey)`, or keeps it for the next such wait. With
   * `idempotencyKey`, a repeated delivery is a no-op (`duplicate: true`).
   */
  signal(runId: string, eventKey: string, data: unknown, options: { idempotencyKey?: string } = {}): Promise<SignalDelivered> {
    return this.#json("POST", `${runPath(runId)}/signals/${encodeURIComponent(eventKey)}`, {
      json: { data: data ?? null },
      headers: idempotency(options.idempotencyKey),
    });
  }

  /** `POST /v1/runs/estimate`: what the run would bill now; nothing is started or called. */
  estimate(body: StartRun): Promise<Estimate> {
    return this.#json("POST", "/v1/runs/estimate", { json: body });
  }

  /**
   * `POST /v1/uploads`: a CSV (header line first) or NDJSON file of up to
   * 95 MB, streamed; the server checks and indexes it as it arrives. A `Blob`
   * (Node: `fs.openAsBlob(path)`) is sent with its length; a stream is sent
   * without one. Larger files go in parts: {@link startMultipartUpload}.
   *
   * @example
   * const { uploadId, rows } = await troupe.upload(await fs.openAsBlob("leads.csv"), { format: "csv" });
   */
  upload(body: string | Blob | ReadableStream<Uint8Array>, options: { format: UploadFormat }): Promise<ReadyUpload> {
    return this.#json("POST", "/v1/uploads", { body, headers: { "Content-Type": CONTENT_TYPES[options.format] } });
  }

  /**
   * `POST /v1/uploads?multipart=1`: starts an upload sent in parts. Send parts
   * 1 to n with {@link uploadPart} (in any order, each but the last the same
   * size of at least 5 MiB, the last no larger), then {@link completeUpload}.
   */
  startMultipartUpload(options: { format: UploadFormat }): Promise<MultipartUploadStarted> {
    return this.#json("POST", "/v1/uploads?multipart=1", { headers: { "Content-Type": CONTENT_TYPES[options.format] } });
  }

  /** `PUT /v1/uploads/<uploadId>/parts/<part>`: one part, with its length (sending a part again replaces it). */
  uploadPart(uploadId: string, part: number, body: string | Blob | ArrayBuffer | Uint8Array<ArrayBuffer>): Promise<UploadPartReceived> {
    return this.#json("PUT", `${uploadPath(uploadId)}/parts/${part}`, { body, headers: { "Content-Type": "application/octet-stream" } });
  }

  /** `POST /v1/uploads/<uploadId>/complete`: joins the parts, then checks and indexes the file (a malformed one is deleted). */
  completeUpload(uploadId: string): Promise<ReadyUpload> {
    return this.#json("POST", `${uploadPath(uploadId)}/complete`);
  }

  /** `GET /v1/uploads/<uploadId>`: a ready upload, or a multipart upload still receiving parts. */
  getUpload(uploadId: string): Promise<UploadView> {
    return this.#json("GET", uploadPath(uploadId));
  }

  /**
   * `GET /v1/uploads`: the org's uploads, ready or receiving parts, in upload-id order (not time order), a page at a
   * time (`nextCursor` null on the last; a page may be short of `limit` and still have one).
   */
  listUploads(options: { limit?: number; cursor?: string } = {}): Promise<UploadList> {
    return this.#json("GET", `/v1/uploads${query({ limit: options.limit, cursor: options.cursor })}`);
  }

  /** `DELETE /v1/uploads/<uploadId>`: removes the upload, ready or receiving parts, and all it stored. */
  deleteUpload(uploadId: string): Promise<{ uploadId: string; deleted: true }> {
    return this.#json("DELETE", uploadPath(uploadId));
  }

  /** `GET /v1/runs/<runId>/events`: one page of the run's ledger after `after`. */
  eventPage(runId: string, options: { after?: number; limit?: number } = {}): Promise<EventPage> {
    return this.#json("GET", `${runPath(runId)}/events${query({ after: options.after, limit: options.limit })}`);
  }

  /**
   * Every row of the run's view of `dataset`, in input order, a page at a time
   * (`pageSize` rows per request, at most 1,000): never the whole dataset in memory.
   *
   * @example
   * for await (const row of client.rows(runId, "leads")) if (row._status === "failed") console.log(row._key, row._error);
   */
  async *rows(runId: string, dataset: string, options: { pageSize?: number } = {}): AsyncGenerator<Record<string, unknown>> {
    const limit = options.pageSize ?? 500;
    const path = `${runPath(runId)}/datasets/${encodeURIComponent(dataset)}`;
    let offset = 0;
    let cursor: string | undefined;
    for (;;) {
      const page: DatasetPage = await this.#json("GET", `${path}${query(cursor === undefined ? { offset, limit } : { cursor, limit })}`);
      yield* page.rows;
      // A server that pages by cursor says so with `nextCursor`; constant cost per page at any depth.
      if (page.nextCursor !== undefined) {
        if (page.nextCursor === null || !page.rows.length) return;
        cursor = page.nextCursor;
        continue;
      }
      offset += page.rows.length;
      if (!page.rows.length || offset >= page.total) return;
    }
  }

  /**
   * The dataset as one file, streamed by the server: `csv` (the default) is a
   * header line, then every row (`safe` neutralises cells a spreadsheet would
   * run); `ndjson` is one JSON object per row, as `rows` gives them.
   */
  async exportDataset(
    runId: string,
    dataset: string,
    options: { format?: "csv" | "ndjson"; safe?: boolean } = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const path = `${runPath(runId)}/datasets/${encodeURIComponent(dataset)}${query({ format: options.format ?? "csv", safe: options.safe ? 1 : undefined })}`;
    const response = await this.#send("GET", path, {});
    if (!response.body)
      throw new TroupeApiError({ status: response.status, code: "empty_response", message: `GET ${path} answered without a body` });
    return response.body;
  }

  /**
   * The run's live feed (`/v1/runs/<runId>/live`): the snapshot, then every
   * event after `after` once, in `seq` order. A dropped socket is reopened with
   * `?after=<last seq>` (a fresh snapshot comes first, then what was missed).
   * An open socket is pinged every `heartbeatSeconds` (default 30), and one
   * silent for twice that (a connection that died without a close) is
   * reopened the same way. Ends after `run.completed`, `run.failed` or
   * `run.cancelled`, or quietly when `signal` aborts; `break` closes the socket.
   *
   * @example
   * for await (const message of client.events(runId)) {
   *   if (message.type === "map.progress") console.log(message.map, message.completed, "/", message.total);
   * }
   */
  events(runId: string, options: EventsOptions = {}): AsyncIterable<LiveMessage> {
    const WebSocketClass = this.#WebSocket ?? globalThis.WebSocket;
    if (!WebSocketClass)
      throw new TroupeApiError({
        status: 0,
        code: "no_websocket",
        message: "this runtime has no WebSocket: pass one as the WebSocket option (Node ≥ 22 has it built in)",
      });
    const live = new URL(`${this.baseUrl}${runPath(runId)}/live`);
    live.protocol = live.protocol === "https:" ? "wss:" : "ws:";
    return liveEvents(
      {
        url: (after) => `${live.href}${query({ token: this.#token, after })}`,
        WebSocket: WebSocketClass,
        verify: () => this.get(runId),
        eventsAfter: async (after): Promise<LedgerEvent[]> => (await this.eventPage(runId, { after, limit: 1000 })).events,
      },
      options,
    );
  }

  async #json<T>(method: string, path: string, request: JsonRequest = {}): Promise<T> {
    const response = await this.#send(method, path, request);
    return (await response.json()) as T;
  }

  /** `text` with the token, and each of its words, replaced. */
  #withoutToken(text: string): string {
    const parts = [this.#token, ...this.#token.split(/\s+/)].filter((part) => part.length >= 4).sort((a, b) => b.length - a.length);
    return parts.reduce((out, part) => out.split(part).join("[token]"), text);
  }

  async #send(method: string, path: string, request: JsonRequest): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, ...request.headers };
    let body = request.body;
    if (request.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(request.json);
    }
    // A streamed request body needs half duplex in Node's fetch (browsers accept the flag).
    const init: RequestInit & { duplex?: "half" } = { method, headers, body };
    if (typeof ReadableStream !== "undefined" && body instanceof ReadableStream) init.duplex = "half";
    const url = `${this.baseUrl}${path}`;
    try {
      // What fetch refuses before sending (a URL it cannot parse, a header value it cannot carry) is checked first:
      // a browser's fetch reports a server it cannot reach with the same bare TypeError.
      new Request(url, { method, headers });
    } catch (error) {
      throw new TroupeApiError({
        status: 0,
        code: "invalid_request",
        // Not the error itself as the cause: its message quotes the header (the token) it refused.
        message: `could not send ${method} ${path} (${this.#withoutToken(messageOf(error))}); check the token and the URL`,
      });
    }
    let response: Response;
    try {
      response = await this.#fetch(url, init);
    } catch (error) {
      // Node's fetch says "fetch failed" and puts the reason (ECONNREFUSED, a bad port) in `cause`; a browser's
      // says only "Failed to fetch" (or "Load failed", "NetworkError ...").
      const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
      const reason = this.#withoutToken(cause?.code ?? cause?.message ?? messageOf(error));
      const local = /^https?:\/\/(127\.0\.0\.1|localhost)[:/]/.test(`${this.baseUrl}/`);
      throw new TroupeApiError({
        status: 0,
        code: "unreachable",
        message: `could not reach ${this.baseUrl} (${reason}); is the server running?${local ? " (npm start)" : ""}`,
        cause: error,
      });
    }
    if (!response.ok) throw await errorOf(response, `${method} ${path}`);
    return response;
  }
}

/** An upload's format. */
type UploadFormat = ReadyUpload["format"];

const CONTENT_TYPES: Record<UploadFormat, string> = { csv: "text/csv", ndjson: "application/x-ndjson" };

function uploadPath(uploadId: string): string {
  return `/v1/uploads/${encodeURIComponent(uploadId)}`;
}

function runPath(runId: string): string {
  return `/v1/runs/${encodeURIComponent(runId)}`;
}

function idempotency(key: string | undefined): Record<string, string> {
  return key === undefined ? {} : { "Idempotency-Key": key };
}

/** `?a=1&b=x` of the defined values, or "". */
function query(params: Record<string, string | number | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) search.set(name, String(value));
  const text = search.toString();
  return text ? `?${text}` : "";
}

function messageOf(error: unknown): string {
  return (error as Error)?.message ?? String(error);
}
