/**
 * What a row's field names may be. A row is an object copied by assignment
 * on its way (schemas, spreads of computed fields), where a field named
 * `__proto__` sets the copy's prototype instead of a field: it would vanish
 * from the stored row without a word. Such a name is refused where rows come
 * in (rows in hand, a CSV header, an NDJSON line).
 */

/** The field name no row can keep. */
export const UNKEEPABLE_FIELD = "__proto__";

/** Why a row cannot be stored as given: it has a field named `__proto__`. */
export const UNKEEPABLE_FIELD_MESSAGE = `a field may not be named "${UNKEEPABLE_FIELD}" (a JavaScript object takes it as its prototype, not a field, and it would be lost); rename it`;

/** Whether `row` (a parsed JSON object: `JSON.parse` makes `__proto__` an own key) has a field no row can keep. */
export function hasUnkeepableField(row: object): boolean {
  return Object.hasOwn(row, UNKEEPABLE_FIELD);
}

/** Why `header` cannot name a CSV file's columns (a name empty, given twice, or `__proto__`), or null when it can. */
export function headerProblem(header: readonly string[]): string | null {
  const seen = new Set<string>();
  for (const [i, column] of header.entries()) {
    // An empty name (`id,,name`, a trailing comma) is no field a play could read: most often a stray comma.
    if (column === "")
      return `the header's column ${i + 1} has no name; name every column (a comma at the end of the header line makes an unnamed one)`;
    if (column === UNKEEPABLE_FIELD)
      return `the header names a column "${UNKEEPABLE_FIELD}" (column ${i + 1}): ${UNKEEPABLE_FIELD_MESSAGE}`;
    // A column named twice would make each row keep only its last cell.
    if (seen.has(column))
      return `the header names column ${JSON.stringify(column)} twice (again as column ${i + 1}); give each column one name`;
    seen.add(column);
  }
  return null;
}
