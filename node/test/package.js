"use strict";
// The package under test: the installed one when NODE_PATH leads to it
// (scripts/test installs it with the README's command into a project of
// its own under target/ and points NODE_PATH at that project's
// node_modules), otherwise this folder itself.
let pkg;
try {
  pkg = require("redlock-client");
} catch (error) {
  if (error.code !== "MODULE_NOT_FOUND" || !String(error.message).includes("'redlock-client'")) throw error;
  pkg = require("..");
}
module.exports = pkg;
