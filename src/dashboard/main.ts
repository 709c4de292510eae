/**
 * The dashboard, served at `/` by the Worker's static assets: a token gate,
 * then the org's runs (`#/`) or one run (`#/runs/<id>`). It talks to the API
 * only through the typed client, as any other program would.
 */
import { TroupeApiError, TroupeClient } from "../client";
import { h, replaceChildren } from "./dom";
import { runPage } from "./run-page";
import { runsPage } from "./runs-page";
import type { Page, Shell } from "./shell";
import { forgetToken, storedToken, storeToken } from "./token";

const app = document.getElementById("app")!;
const nav = document.getElementById("nav")!;
const notice = document.getElementById("notice")!;

const RUN_ROUTE = /^#\/runs\/([A-Za-z0-9_-]{1,100})$/;

let client: TroupeClient | null = null;
let page: Page | null = null;
let noticeTimer: ReturnType<typeof setTimeout> | undefined;

function clientFor(token: string): TroupeClient {
  return new TroupeClient({ baseUrl: location.origin, token });
}

function showNotice(message: string, kind: "error" | "info"): void {
  clearTimeout(noticeTimer);
  notice.className = kind === "info" ? "notice info" : "notice";
  notice.dataset.kind = kind;
  replaceChildren(notice, message);
  notice.hidden = false;
  noticeTimer = setTimeout(() => (notice.hidden = true), kind === "info" ? 5_000 : 15_000);
}

function messageOf(error: unknown): string {
  if (error instanceof TroupeApiError) return `${error.message} (${error.code}, HTTP ${error.status})`;
  return error instanceof Error ? error.message : String(error);
}

const shell: Shell = {
  get client(): TroupeClient {
    if (!client) throw new Error("no token: the dashboard asks for one before any page is shown");
    return client;
  },
  navigate(hash: string) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  report(error: unknown) {
    if (error instanceof TroupeApiError && error.status === 401) {
      signOut("The server refused the token. Enter a valid one.");
      return;
    }
    console.error(error);
    showNotice(messageOf(error), "error");
  },
  info(message: string) {
    showNotice(message, "info");
  },
};

function mount(next: Page | null, element?: HTMLElement): void {
  page?.dispose();
  page = next;
  replaceChildren(app, next ? next.element : (element ?? null));
}

function renderNav(): void {
  replaceChildren(
    nav,
    client ? h("a", { href: "#/" }, "Runs") : null,
    client ? h("button", { type: "button", "data-testid": "sign-out", onclick: () => signOut(null) }, "Sign out") : null,
  );
}

function signOut(reason: string | null): void {
  forgetToken();
  client = null;
  renderNav();
  mount(null, tokenForm(reason));
}

/** Asks for the token once; it is checked against the API before it is kept. */
function tokenForm(reason: string | null): HTMLElement {
  const input = h("input", {
    type: "password",
    name: "token",
    autocomplete: "off",
    required: true,
    placeholder: "dev-token locally",
    "data-testid": "token-input",
  });
  const error = h("p", { class: "status-failed", "data-testid": "token-error" }, reason ?? "");
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "token-save" }, "Open dashboard");
  const form = h(
    "form",
    {
      onsubmit: async (event: Event) => {
        event.preventDefault();
        const candidate = clientFor(input.value.trim());
        submit.disabled = true;
        replaceChildren(error);
        try {
          await candidate.list({ limit: 1 });
          storeToken(input.value);
          client = candidate;
          renderNav();
          route();
        } catch (e) {
          replaceChildren(
            error,
            e instanceof TroupeApiError && e.status === 401
              ? "That token was refused (401): use one of the server's API_TOKENS."
              : messageOf(e),
          );
        } finally {
          submit.disabled = false;
        }
      },
    },
    h("label", {}, "API token", input),
    submit,
    error,
  );
  return h(
    "div",
    { class: "card token-card" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "The bearer token of your org (API_TOKENS). It is kept in this browser until you sign out."),
    form,
  );
}

function route(): void {
  if (!client) {
    signOut(null);
    return;
  }
  notice.hidden = true;
  const run = RUN_ROUTE.exec(location.hash);
  mount(run ? runPage(shell, run[1]!) : runsPage(shell));
}

function boot(): void {
  const token = storedToken();
  client = token ? clientFor(token) : null;
  renderNav();
  window.addEventListener("hashchange", route);
  route();
}

boot();
