/**
 * The simulated provider's tools as pure functions: what each tool answers for
 * an input, and which inputs fail. Failures are decided by the input alone so
 * tests are deterministic; the one stateful rule (`!flaky` names and
 * `!unavailable` emails fail on the first call per idempotency key) is
 * expressed as an outcome the store resolves.
 */
import { z } from "zod";
import { describeIssues } from "../core/errors";

/** Input of `sim_find_email`. */
export const FindEmailInput = z.object({ name: z.string(), domain: z.string() });
export type FindEmailInput = z.infer<typeof FindEmailInput>;

/** Input of `sim_verify_email`. */
export const VerifyEmailInput = z.object({ email: z.string() });
export type VerifyEmailInput = z.infer<typeof VerifyEmailInput>;

/** Names of the tools the simulator serves. */
export const SIM_TOOLS = ["sim_find_email", "sim_verify_email"] as const;
export type SimToolName = (typeof SIM_TOOLS)[number];

/** Tools that accept `POST /batch`. */
export const BATCHABLE_TOOLS: ReadonlySet<SimToolName> = new Set<SimToolName>(["sim_verify_email"]);

/** Whether `tool` is one the simulator serves. */
export function isSimTool(tool: string): tool is SimToolName {
  return (SIM_TOOLS as readonly string[]).includes(tool);
}

/** A tool failure as the provider reports it. */
export interface SimFailure {
  status: 400 | 422 | 503;
  code: string;
  message: string;
}

/**
 * What an input deserves before billing state is consulted:
 * - `ok`: succeed with `output`;
 * - `failed`: answer the failure (never billed);
 * - `flaky`: fail with `failure` the first time this idempotency key is seen,
 *   succeed with `output` afterwards.
 */
export type Evaluation =
  | { kind: "ok"; output: unknown }
  | { kind: "failed"; failure: SimFailure }
  | { kind: "flaky"; output: unknown; failure: SimFailure };

/**
 * `sim_find_email`'s address: the name with runs of whitespace replaced by
 * `.`, `@`, the domain, all lowercased.
 *
 * @example findEmail("Ada  Lovelace", "Example.COM") // "ada.lovelace@example.com"
 */
export function findEmail(name: string, domain: string): string {
  return `${name.replace(/\s+/g, ".")}@${domain}`.toLowerCase();
}

/** `sim_verify_email`'s verdict: `invalid` when the UTF-16 code-unit sum is divisible by 3. */
export function verifyVerdict(email: string): "valid" | "invalid" {
  let sum = 0;
  for (let i = 0; i < email.length; i++) sum += email.charCodeAt(i);
  return sum % 3 !== 0 ? "valid" : "invalid";
}

/** What a `flaky` input gets the first time its key is seen. */
const UNAVAILABLE: SimFailure = {
  status: 503,
  code: "provider_unavailable",
  message: "The provider is temporarily unavailable; retry with the same idempotency key.",
};

/** Evaluates one call of `tool` on `input` (input validation included). */
export function evaluate(tool: SimToolName, input: unknown): Evaluation {
  switch (tool) {
    case "sim_find_email": {
      const parsed = FindEmailInput.safeParse(input);
      if (!parsed.success) return { kind: "failed", failure: invalidInput(tool, parsed.error) };
      const { name, domain } = parsed.data;
      const output = { email: findEmail(name, domain) };
      if (name.startsWith("!fail")) {
        return { kind: "failed", failure: { status: 422, code: "person_not_found", message: `No person named "${name}" at ${domain}.` } };
      }
      if (name.startsWith("!flaky")) return { kind: "flaky", output, failure: UNAVAILABLE };
      return { kind: "ok", output };
    }
    case "sim_verify_email": {
      const parsed = VerifyEmailInput.safeParse(input);
      if (!parsed.success) return { kind: "failed", failure: invalidInput(tool, parsed.error) };
      const output = { email: parsed.data.email, verdict: verifyVerdict(parsed.data.email) };
      if (parsed.data.email.startsWith("!unavailable")) return { kind: "flaky", output, failure: UNAVAILABLE };
      return { kind: "ok", output };
    }
  }
}

function invalidInput(tool: string, error: z.ZodError): SimFailure {
  return { status: 400, code: "invalid_request", message: `Invalid input for ${tool}: ${describeIssues(error)}` };
}
