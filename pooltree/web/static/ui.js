// Expand/collapse of pools and open resource details survive the htmx refreshes of the page body.
(function () {
  const collapsed = new Set(JSON.parse(sessionStorage.getItem("pooltree-collapsed") || "[]"));
  let openDetails = new Set();

  function save() { sessionStorage.setItem("pooltree-collapsed", JSON.stringify([...collapsed])); }

  function apply(root) {
    const rows = root.querySelectorAll("tr[data-id]");
    const hiddenBy = new Map();
    rows.forEach(function (row) {
      const parent = row.dataset.parent;
      const hidden = parent && (collapsed.has(parent) || hiddenBy.get(parent));
      hiddenBy.set(row.dataset.id, Boolean(hidden));
      row.classList.toggle("hidden", Boolean(hidden));
      const button = row.querySelector("button.toggle");
      if (button) { button.textContent = collapsed.has(row.dataset.id) ? "▸" : "▾"; }
    });
    root.querySelectorAll("details[data-key]").forEach(function (d) {
      if (openDetails.has(d.dataset.key)) { d.open = true; }
    });
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest("button.toggle");
    if (!button) { return; }
    const id = button.closest("tr").dataset.id;
    if (collapsed.has(id)) { collapsed.delete(id); } else { collapsed.add(id); }
    save();
    apply(document);
  });
  document.addEventListener("toggle", function (event) {
    const d = event.target;
    if (d.dataset && d.dataset.key) { if (d.open) { openDetails.add(d.dataset.key); } else { openDetails.delete(d.dataset.key); } }
  }, true);
  // After "settle": htmx copies the server's class attributes back onto rows that keep their id, which would
  // undo the collapsed state applied right after the swap.
  document.addEventListener("htmx:afterSettle", function (event) {
    apply(event.target);
    event.target.dataset.swapped = String(Date.now());  // tests and people can tell a refresh happened
  });
  document.addEventListener("DOMContentLoaded", function () { apply(document); });
})();
