// Swagger UI as the page expects it from swagger-ui-dist's bundle: window.SwaggerUIBundle.
import SwaggerUI from 'swagger-ui';

window.SwaggerUIBundle = SwaggerUI;
