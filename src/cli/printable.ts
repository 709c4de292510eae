/**
 * Text from the server made safe to print: log lines and error messages may
 * quote rows, websites and provider answers, and an escape sequence in them
 * would drive the terminal (rewrite what it shows, set the clipboard). Control
 * characters but tab and newline are shown as `\xNN` instead.
 */
const CONTROL = new RegExp("[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]", "g");

export function printable(text: string): string {
  return text.replace(CONTROL, (ch) => `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}`);
}
