/* ui.h - the admin page's files (GET /ui, issue 18), embedded in micd.
 *
 * The page's files (server/http/ui/index.html, app.js, app.css) are turned into
 * a C header at build time (server/http/ui/embed.c writes build/ui_files.h)
 * and compiled into micd: no file is read at run time, nothing comes from
 * the network.  The files hold no data and no secret: they are served
 * without a key (routes.c gives them the permission MIC_PERM_OPEN, like
 * /healthz), and everything the page shows comes from API calls its
 * script makes with the key the user typed (server/http/ui/README.md).
 *
 * routes.c builds the replies (it is the only file that does); this file
 * says what each path serves and with which headers. */
#ifndef MIC_UI_H
#define MIC_UI_H

#include <stddef.h>

/* Content-Security-Policy of every file of the page: nothing off-origin
 * (no CDN, no inline script or style, no frames, forms or base changes);
 * the script may only call micd itself (connect-src 'self'). */
#define MIC_UI_CSP                                                              \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
/* Cache-Control: a browser may keep a copy but asks again each time (the
 * ETag makes that a 304), so a new micd's page is seen at once. */
#define MIC_UI_CACHE "no-cache"

struct mic_ui_file {
    const char *content_type;
    const unsigned char *data;  /* static: valid for the process's life */
    size_t len;
    const char *etag;           /* quoted, as the ETag header wants */
};

/* The file served at URL path 'path': "/ui" and "/ui/" the HTML page,
 * "/ui/app.js" and "/ui/app.css".  Returns 1 with *out filled (static
 * data), or 0 for any other path. */
int mic_ui_find(const char *path, struct mic_ui_file *out);

/* Does an If-None-Match header value 'inm' (NULL: none) name 'etag'
 * ("*", one ETag or a comma-separated list; W/ prefixes compare weakly)?
 * 1 if it does (answer 304), 0 if not. */
int mic_ui_not_modified(const char *inm, const char *etag);

#endif
