import { startConsole } from '/admin/console.js';
startConsole(document, { refreshMs: Number(new URLSearchParams(location.search).get('refreshMs') || 10000) });
