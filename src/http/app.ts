/** The HTTP API (API.md): auth, size limits, validation, routes. */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { pacingRoutes } from "./pacing";
import { simRoutes } from "./sim";
import { testRoutes } from "./faults";
import { orgOf, tokenConfig } from "./auth";
import type { AppEnv } from "./context";
import { errorResponse, onError } from "./errors";
import { datasetRoutes } from "./datasets";
import { liveRoutes } from "./live";
import { playRoutes } from "./plays";
import { runRoutes } from "./runs";
import { signalRoutes } from "./signals";
import { spendRoutes } from "./spend";
import { STREAMED_BODY_ROUTE, uploadRoutes } from "./uploads";

/** The largest request body accepted (a run's input travels in it). */
export const MAX_REQUEST_BYTES = 16 * 1024 * 1024;

export const app = new Hono<AppEnv>();

app.onError(onError);
app.notFound((c) => errorResponse(c, 404, "not_found", `no route for ${c.req.method} ${new URL(c.req.url).pathname}`));

// The dashboard's static assets answer `/` before the Worker does; this is reached only where they were not built.
app.get("/", (c) => c.json({ name: "troupe", api: "/v1", dashboard: "not built: run `npm run build` (npm start does) to serve it at /" }));

/** The one route that may carry its token as `?token=`: WebSocket clients in browsers cannot send headers. */
const QUERY_TOKEN_ROUTE = /^\/v1\/runs\/[^/]+\/live$/;

app.use("/v1/*", async (c, next) => {
  // A Worker without usable tokens refuses everything, rather than fall back to the development token.
  const config = tokenConfig(c.env);
  if (config.status === "misconfigured") return errorResponse(c, 503, "server_misconfigured", config.problem);
  const org = orgOf(config.tokens, c.req.raw, { queryToken: QUERY_TOKEN_ROUTE.test(new URL(c.req.url).pathname) });
  if (!org) return errorResponse(c, 401, "unauthorized", "send Authorization: Bearer <token> with a token from API_TOKENS");
  c.set("org", org);
  await next();
});

const limitedBody = bodyLimit({
  maxSize: MAX_REQUEST_BYTES,
  onError: (c) =>
    errorResponse(
      c,
      413,
      "request_too_large",
      `request bodies are limited to ${MAX_REQUEST_BYTES} bytes; split the input into several runs`,
    ),
});
// Hono's body limit reads a body of unknown length into memory to measure it: uploads stream theirs and limit it themselves.
app.use("/v1/*", (c, next) => (STREAMED_BODY_ROUTE.test(new URL(c.req.url).pathname) ? next() : limitedBody(c, next)));

// A fixed path beside a parameter route is answered as itself for every method: GET /v1/runs/estimate would otherwise be
// taken for the run "estimate" (GET /v1/runs/:runId). A wrong method is 404 not_found, as for any path no route takes.
app.on(["GET", "PUT", "PATCH", "DELETE"], "/v1/runs/estimate", (c) =>
  errorResponse(c, 404, "not_found", `no route for ${c.req.method} /v1/runs/estimate: it takes POST, with the body of a run to estimate`),
);

app.route("/v1", playRoutes);
app.route("/v1", runRoutes);
app.route("/v1", datasetRoutes);
app.route("/v1", liveRoutes);
app.route("/v1", signalRoutes);
app.route("/v1", spendRoutes);
app.route("/v1", uploadRoutes);

// Tool dispatch: the org's provider pacing, and the test-only fault plan (404 outside test mode).
app.route("/v1/pacing", pacingRoutes);
app.route("/v1/test", testRoutes);

app.use("/v1/sim/*", async (c, next) => {
  if (c.env.SIM_PROVIDER !== "on") return errorResponse(c, 404, "not_found", "the simulated provider is off (SIM_PROVIDER)");
  await next();
});
app.route("/v1/sim", simRoutes);
