// The request the playground would send, as a curl command or as Python with the openai client.
// The key is never written into a snippet: both read it from $MSTAR_API_KEY.
"use strict";

function shellQuote(text) {
  return "'" + text.replace(/'/g, "'\\''") + "'";
}

function curlSnippet(origin, body) {
  return [
    "curl " + origin + "/v1/chat/completions \\",
    "  -H 'Content-Type: application/json' \\",
    '  -H "Authorization: Bearer $MSTAR_API_KEY" \\',
    "  -d " + shellQuote(JSON.stringify(body, null, 2)),
  ].join("\n");
}

// A JSON value as a Python literal: JSON's string escapes are Python's too.
function pyLiteral(value, indent) {
  const pad = "    ".repeat(indent + 1);
  const end = "    ".repeat(indent);
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return "[\n" + value.map((v) => pad + pyLiteral(v, indent + 1)).join(",\n") + ",\n" + end + "]";
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  const items = entries.map(([k, v]) => pad + JSON.stringify(k) + ": " + pyLiteral(v, indent + 1));
  return "{\n" + items.join(",\n") + ",\n" + end + "}";
}

function pythonSnippet(origin, body) {
  const lines = [
    "import os",
    "",
    "from openai import OpenAI",
    "",
    'client = OpenAI(base_url="' + origin + '/v1", api_key=os.environ.get("MSTAR_API_KEY", "none"))',
    "stream = client.chat.completions.create(",
  ];
  for (const [name, value] of Object.entries(body)) {
    lines.push("    " + name + "=" + pyLiteral(value, 1) + ",");
  }
  lines.push(")");
  lines.push("for chunk in stream:");
  lines.push("    if chunk.choices and chunk.choices[0].delta.content:");
  lines.push('        print(chunk.choices[0].delta.content, end="", flush=True)');
  lines.push("print()");
  return lines.join("\n");
}
