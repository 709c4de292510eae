/**
 * The first issues of a large value, found without gathering all of them.
 * zod collects every issue of a value before it answers, a few hundred bytes
 * each: a 16 MiB body of 8,000,000 wrong items is gigabytes of issues, past
 * an isolate's memory, where the answer lists at most {@link MAX_ISSUES}. So
 * a value past {@link WHOLE_PARSE_VALUES} is first checked in parts: its
 * object fields and array items, down to parts of at most that many values,
 * each parsed alone by its own schema (an item of `z.array(item)` is exactly
 * what the whole parse gives `item`), stopping once enough issues are found.
 * Only parts whose schema is a plain object or array (or one made optional,
 * nullable or defaulted) are split; a larger part of another kind (a union,
 * a transform) is left to the whole parse, so no transform runs twice on a
 * large value. With no issue found in parts, the whole parse has only the
 * containers' own checks left to fail (sizes, unknown keys, refinements).
 */
import type { z } from "zod";
import { MAX_ISSUES } from "../core/errors";

/** Values (each object, array and scalar counts one) a value may hold to be parsed whole at once. */
export const WHOLE_PARSE_VALUES = 50_000;

/** An issue of a part, its path from the value's root. */
export interface PartIssue {
  path: PropertyKey[];
  message: string;
}

/**
 * Up to about {@link MAX_ISSUES} issues of `value` against `schema` found in
 * parts, or null when `value` is small enough to parse whole (or its schema
 * cannot be split) and the caller should parse it as usual. An empty list:
 * no part has an issue.
 *
 * @example
 * const issues = issuesInParts(play.input, input);
 * if (issues?.length) refuse(issues); else schema.safeParse(input);
 */
export function issuesInParts(schema: z.ZodType, value: unknown): PartIssue[] | null {
  if (valuesUpTo(value, WHOLE_PARSE_VALUES + 1) <= WHOLE_PARSE_VALUES || !splittable(schema, value)) return null;
  const issues: PartIssue[] = [];
  check(schema, value, [], issues);
  return issues;
}

/** A part's issues into `issues`, split further while it is large and its schema splits. */
function check(schema: z.ZodType, value: unknown, path: PropertyKey[], issues: PartIssue[]): void {
  if (issues.length >= MAX_ISSUES) return;
  const large = valuesUpTo(value, WHOLE_PARSE_VALUES + 1) > WHOLE_PARSE_VALUES;
  if (!large) {
    parseInto(schema, value, path, issues);
    return;
  }
  const inner = unwrapped(schema, value);
  if (!inner) return;
  const def = inner.def as { type: string; shape?: Record<string, z.ZodType>; element?: z.ZodType };
  if (def.type === "object" && def.shape && isPlainObject(value)) {
    for (const [key, field] of Object.entries(def.shape)) {
      check(field, Object.hasOwn(value, key) ? value[key] : undefined, [...path, key], issues);
      if (issues.length >= MAX_ISSUES) return;
    }
  } else if (def.type === "array" && def.element && Array.isArray(value)) {
    if (value.length > maxItems(inner)) {
      // Past its `.max`, zod answers that alone without walking the items (one issue).
      parseInto(inner, value, path, issues);
      return;
    }
    for (let i = 0; i < value.length && issues.length < MAX_ISSUES; i++) check(def.element, value[i], [...path, i], issues);
  }
}

/** `value` parsed whole by `schema`: its issues into `issues`, their paths from the root. */
function parseInto(schema: z.ZodType, value: unknown, path: PropertyKey[], issues: PartIssue[]): void {
  const result = schema.safeParse(value);
  if (!result.success) for (const issue of result.error.issues) issues.push({ path: [...path, ...issue.path], message: issue.message });
}

/** The most items an array schema takes (its `.max` / `.length`), from its checks as zod's internals list them. */
function maxItems(schema: z.ZodType): number {
  const checks = (schema.def as { checks?: { _zod: { def: { check?: string; maximum?: number; length?: number } } }[] }).checks ?? [];
  let max = Number.POSITIVE_INFINITY;
  for (const { _zod } of checks) {
    if (_zod.def.check === "max_length" && typeof _zod.def.maximum === "number") max = Math.min(max, _zod.def.maximum);
    if (_zod.def.check === "length_equals" && typeof _zod.def.length === "number") max = Math.min(max, _zod.def.length);
  }
  return max;
}

/** Whether `schema` splits `value` into parts (a plain object or array, through optional, nullable and default). */
function splittable(schema: z.ZodType, value: unknown): boolean {
  const inner = unwrapped(schema, value);
  const type = (inner?.def as { type?: string } | undefined)?.type;
  return (type === "object" && isPlainObject(value)) || (type === "array" && Array.isArray(value));
}

/** The schema that parses `value` under optional, nullable and default wrappers; null for another kind. */
function unwrapped(schema: z.ZodType, value: unknown): z.ZodType | null {
  let current = schema;
  for (;;) {
    const def = current.def as { type: string; innerType?: z.ZodType };
    if (def.type === "object" || def.type === "array") return current;
    const wraps = def.type === "optional" || def.type === "nullable" || def.type === "default";
    if (!wraps || !def.innerType || value === undefined || value === null) return null;
    current = def.innerType;
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** How many values `value` holds, counting no further than `limit`. Iterative. */
export function valuesUpTo(value: unknown, limit: number): number {
  const stack: unknown[] = [value];
  let count = 0;
  while (stack.length > 0 && count < limit) {
    const current = stack.pop();
    count++;
    if (current === null || typeof current !== "object") continue;
    const items = Array.isArray(current) ? current : Object.values(current);
    // Only as many as could still be counted: a container of millions pushes no more than the limit.
    for (let i = 0; i < items.length && stack.length < limit; i++) stack.push(items[i]);
  }
  return count;
}
