// Embed mode (`?embed=1` on a head's page and on the scatter of every head): the page without
// its chrome, for an iframe in slides or a blog. The server leaves the header out and lets the
// page be framed (app/security.py); here, links keep the mode between the two embeddable pages
// and open every other page in a new tab, out of the frame.

/** The state key that keeps the mode in the page's link (createState drops what it does not know). */
export const EMBED_STATE = { embed: "" };

export const embedded = () => new URLSearchParams(window.location.search).get("embed") === "1";

/** Whether a path is one of the embeddable pages (the head page, the scatter). */
const embeddable = (url) => /^\/heads?\//.test(url.pathname);

/** href with embed=1 added where the page is embedded and the link stays in embeddable pages. */
export function embedLink(href) {
  if (!embedded()) return href;
  const url = new URL(href, window.location.href);
  if (url.origin !== window.location.origin || !embeddable(url)) return href;
  url.searchParams.set("embed", "1");
  return `${url.pathname}${url.search}${url.hash}`;
}

/** In embed mode, every link clicked keeps the mode (embeddable pages) or opens in a new tab. */
export function keepEmbedded() {
  if (!embedded()) return;
  document.addEventListener("click", (event) => {
    const link = event.target.closest?.("a[href]");
    if (!link || link.getAttribute("href").startsWith("#")) return;
    const url = new URL(link.href);
    if (url.origin === window.location.origin && embeddable(url)) link.href = embedLink(link.href);
    else {
      link.target = "_blank";
      link.rel = "noopener";
    }
  });
}
