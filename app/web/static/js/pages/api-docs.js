// Starts Swagger UI on /docs. A static file rather than an inline script, so the page keeps the
// app's Content-Security-Policy (script-src 'self'); Swagger UI itself is served from this server.
const root = document.getElementById("swagger-ui");
window.SwaggerUIBundle({
  url: root.dataset.specUrl,
  domNode: root,
  deepLinking: false, // its anchors sit inside buttons (nested interactive controls)
  tryItOutEnabled: false,
  displayRequestDuration: true,
  defaultModelsExpandDepth: 0,
  presets: [window.SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  validatorUrl: null, // the public validator badge would call an outside server
});
