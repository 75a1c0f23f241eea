import { startConsole } from '/admin/console.js';
startConsole(document, { refreshMs: new URLSearchParams(location.search).get('refreshMs') });
