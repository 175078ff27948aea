package web

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

// The explorer UI: plain HTML, CSS and JavaScript modules, no build step.
// Every page is the same shell (ui/index.html); app.js reads the path.
//
//go:embed ui
var uiFiles embed.FS

// uiPages are the paths the shell page answers.
var uiPages = []string{"/", "/findings/:id", "/objects", "/jq", "/reports"}

// contentSecurityPolicy keeps an event's text from ever running as code
// in the UI: scripts and styles come only from /ui/, never inline. The UI
// builds its DOM from text nodes as well; this is the second fence.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'"

func (s *server) routeUI(r *gin.Engine) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree always has ui/
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	r.GET("/ui/*file", func(c *gin.Context) {
		c.Header("X-Content-Type-Options", "nosniff")
		c.Header("Cache-Control", "no-cache")
		files.ServeHTTP(c.Writer, c.Request)
	})
	page := func(c *gin.Context) {
		b, err := fs.ReadFile(sub, "index.html")
		if err != nil {
			s.fail(c, http.StatusInternalServerError, err)
			return
		}
		c.Header("Content-Security-Policy", contentSecurityPolicy)
		// No other site may frame the UI (clickjacking); older browsers
		// read X-Frame-Options.
		c.Header("X-Frame-Options", "SAMEORIGIN")
		c.Header("X-Content-Type-Options", "nosniff")
		c.Header("Referrer-Policy", "no-referrer")
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "text/html; charset=utf-8", b)
	}
	for _, p := range uiPages {
		r.GET(p, page)
	}
}

// info serves GET /api/v1/info: what the UI shows about this server (the
// webhook kubeconfig to point an apiserver here).
func (s *server) info(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"webhook_kubeconfig": s.cfg.Info})
}
