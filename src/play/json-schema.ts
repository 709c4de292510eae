/**
 * A play's input as JSON Schema (draft 2020-12), for `GET /v1/plays`:
 * generated from its zod schema, describing what a client may send (the
 * input side of transforms and defaults).
 */
import { z } from "zod";
import { messageOf } from "../core/errors";

/** A JSON Schema document. */
export type JsonSchema = Record<string, unknown>;

/** Schemas whose accepted shape is better told by another schema (see `describeInputAs`). */
const documented = new WeakMap<z.ZodType, z.ZodType>();
/** Generated once per schema: plays are module constants, so this never grows past the registry. */
const generated = new WeakMap<z.ZodType, JsonSchema>();

/**
 * Says what an input schema accepts, for its JSON Schema, when the schema
 * cannot tell it: a transform that parses CSV text into rows only shows the
 * text. Validation still uses `schema`; `shape` documents it and is never run.
 *
 * @example
 * const input = describeInputAs(z.string().transform(parseLines), z.string().describe("one item per line"));
 */
export function describeInputAs<S extends z.ZodType>(schema: S, shape: z.ZodType): S {
  documented.set(schema, shape);
  generated.delete(schema);
  return schema;
}

/**
 * The JSON Schema of what `schema` accepts. Never throws: parts zod cannot
 * express (a bigint, a date, a custom check) are left open (`{}`, anything),
 * and the document then says why in `x-troupe-incomplete`. The server still
 * validates every input with the zod schema itself.
 */
export function inputJsonSchema(schema: z.ZodType): JsonSchema {
  let json = generated.get(schema);
  if (!json) {
    json = generate(documented.get(schema) ?? schema);
    generated.set(schema, json);
  }
  return json;
}

function generate(schema: z.ZodType): JsonSchema {
  try {
    return z.toJSONSchema(schema, { io: "input", unrepresentable: "throw" }) as JsonSchema;
  } catch (exact) {
    const incomplete = messageOf(exact);
    try {
      return { ...(z.toJSONSchema(schema, { io: "input", unrepresentable: "any" }) as JsonSchema), "x-troupe-incomplete": incomplete };
    } catch (error) {
      // Nothing could be generated: an empty schema (anything) is still true, and says why.
      return { $schema: "https://json-schema.org/draft/2020-12/schema", "x-troupe-incomplete": messageOf(error) };
    }
  }
}
