// Signs this browser in to the status page with the one-time code in the link's
// fragment (`mcpx status --open`): the fragment never leaves the browser, the code is
// sent once in a POST body, and the daemon answers with a session cookie and a
// redirect to the page.  The fragment is cleared from the address bar and history first.
"use strict";
(function () {
  const state = document.getElementById("login-state");
  const code = decodeURIComponent(window.location.hash.replace(/^#/, ""));
  history.replaceState(null, "", "/login");
  if (!code) {
    state.textContent = "This link carries no code: run `mcpx status --open` again.";
    return;
  }
  fetch("/login", {
    method: "POST",
    credentials: "same-origin",
    cache: "no-store",
    redirect: "manual",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ code: code }),
  }).then(async function (response) {
    // The daemon's 303 to the page is an opaque redirect here: the cookie is set.
    if (response.type === "opaqueredirect" || response.ok) {
      window.location.replace("/");
      return;
    }
    let message = "";
    try {
      message = ((await response.json()).error || {}).message || "";
    } catch (_) {
      message = "";
    }
    state.textContent = message || `The daemon refused this link (HTTP ${response.status}).`;
  }, function () {
    state.textContent = "The daemon could not be reached.";
  });
})();
