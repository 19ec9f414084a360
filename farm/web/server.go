package web

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/jobqueue"
)

//go:embed assets
var assetFiles embed.FS

// Config configures NewServer. Queue is required; every other field has a
// documented default. Its numeric fields follow the one rule of every
// config struct: 0 means the default; none of them can be off; a negative
// one is a programming error that NewServer reports by panicking with the
// field's name, as it does for a nil Queue.
type Config struct {
	// Queue is the job queue the API reads and changes.
	Queue *jobqueue.Queue
	// Token is the bearer token mutating calls must present
	// (FARM_API_TOKEN). Empty means mutating calls are refused with 403:
	// the API is never open by accident.
	Token string
	// ReadToken is a bearer token for the read endpoints (FARM_READ_TOKEN):
	// it lets a dashboard or a reader see jobs and results without the
	// power to change the farm. Token is accepted for reads too.
	ReadToken string
	// ReadAuth makes every /api/ read need ReadToken or Token (401 without
	// one, 403 when neither is configured). The producer sets it when it
	// listens beyond loopback or a ReadToken is set: job specs, errors
	// and results are the submitters' data. The dashboard page and its
	// assets, /healthz, /readyz and /metrics (counts only) stay open.
	ReadAuth bool
	// IsLeader reports whether this producer currently assigns jobs. A
	// standby serves the dashboard, the read endpoints and /metrics, and
	// refuses mutating calls with 503 so that one producer acts on the farm.
	// Nil means this producer is always the leader.
	IsLeader func() bool
	// Desired returns the autoscaler's desired node count and whether
	// autoscaling is on. Nil means it is off.
	Desired func() (int, bool)
	// Metrics, when set, is wired to Queue (its queue-derived series) and
	// to IsLeader (its leader gauge).
	Metrics *Metrics
	// Gatherer is what /metrics serves. Nil means /metrics answers 404.
	Gatherer prometheus.Gatherer
	// Logger receives request errors. Default: zap.NewNop().
	Logger *zap.Logger
	// MaxBodyBytes bounds a request body. 0: the default, 8 MiB (about
	// 40,000 simple specs; a bigger batch goes in several calls).
	MaxBodyBytes int64
	// Blobs is where results' HTML and screenshots are when the consumers
	// keep them in a blob store; the API streams them from there.
	Blobs blobstore.Store
	// Version is shown on the dashboard and in /api/stats.
	Version string
	// ChartWindow is how far back the charts reach by default. 0: the
	// default, 1 h (the Recorder's default retention).
	ChartWindow time.Duration
	// ChartStep is the default bucket width of /api/samples. 0: the
	// default, 10 s.
	ChartStep time.Duration
	// StaleAfter is the heartbeat age at which the dashboard flags a node
	// that is not yet declared lost. 0: the default, the queue's
	// (jobqueue.DefaultStaleAfter, 15 s): the age at which the producer's
	// rescue declares it lost, so a flagged node is one about to be.
	StaleAfter time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// HostPolicy returns the politeness limits of a host, for GET
	// /api/hosts. Nil: the hosts view shows activity without limits.
	HostPolicy func(host string) jobqueue.HostPolicy
	// Wake, if set, serves the nodes' wake-up long-polls (GET
	// /api/nodes/{id}/wake), for nodes started with --wake-url. The
	// producer feeds it (farm.ProducerConfig.Wake); close it before the
	// HTTP server shuts down, which waits for parked polls. Nil: 404.
	Wake *wake.Hub
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultChartWindow  = time.Hour
	DefaultChartStep    = 10 * time.Second
	DefaultStaleAfter   = jobqueue.DefaultStaleAfter
	// maxChartPoints bounds the buckets of one /api/samples series; a wider
	// window gets wider buckets.
	maxChartPoints = 2000
	// maxChartNodes bounds the nodes of /api/samples: a fleet larger than
	// that shows the nodes with the highest Chrome PSS over the chart
	// window (ChartWindow), so that a response, and the chart, do not grow
	// with the fleet.
	maxChartNodes = 12
	// chosenNodesTTL is how long the chart's choice of nodes is kept: the
	// hour's peaks move slowly, and ranking them reads the hour's samples
	// (80 ms a poll at 1,000 nodes, BenchmarkSamplesAPI).
	chosenNodesTTL = time.Minute
	// dbTimeout bounds the database work of one request.
	dbTimeout = 15 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if err := errors.Join(
		cfgrule.Resolve("MaxBodyBytes", &c.MaxBodyBytes, DefaultMaxBodyBytes, false),
		cfgrule.Resolve("ChartWindow", &c.ChartWindow, DefaultChartWindow, false),
		cfgrule.Resolve("ChartStep", &c.ChartStep, DefaultChartStep, false),
		cfgrule.Resolve("StaleAfter", &c.StaleAfter, DefaultStaleAfter, false),
	); err != nil {
		panic("web.NewServer: Config." + err.Error())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return c
}

type server struct {
	cfg       Config
	q         *jobqueue.Queue
	log       *zap.Logger
	tokenHash [sha256.Size]byte
	readHash  [sha256.Size]byte
	chosen    chosenNodes
}

// NewServer returns the producer's HTTP handler. It panics when cfg.Queue is
// nil, a wiring error. Answers are JSON; errors are {"error": "..."} with a
// fitting status (a bad spec adds "index" and "field").
//
//	GET  /                           the dashboard (assets under /assets/, embedded)
//	GET  /api/nodes                  nodes with load, heartbeat age, stale/overloaded flags
//	GET  /api/stats                  queue counts, leader, desired node count
//	GET  /api/jobs                   ?state=a,b&node=&batch=&host=&limit=1..1000&after=<next>
//	                                 (a page can be short with a next: jobqueue.Page.SearchedDownTo)
//	GET  /api/jobs/{id}              the job and a summary of its result
//	GET  /api/jobs/{id}/result       the full result
//	GET  /api/jobs/{id}/screenshot   image/png
//	GET  /api/hosts                  hosts in flight or started lately: running / limit, next allowed start
//	GET  /api/batches/{id}           a batch's jobs by state (progress; the dashboard derives the ETA)
//	GET  /api/samples                ?since=<RFC 3339 or Unix s>&step=<10s>: chart columns
//	GET  /api/failures               ?since=&per_class=: failures by error class
//	POST /api/jobs                   [spec, ...] or {"jobs": [...]}: 201 {batch_id, ids}
//	POST /api/jobs/{id}/cancel, /api/jobs/{id}/retry, /api/batches/{id}/cancel,
//	     /api/nodes/{id}/drain
//	GET  /api/nodes/{id}/wake        ?wait=25s: a node's long-poll, {"woken": bool} (with Config.Wake)
//	GET  /metrics, /healthz, /readyz
//
// POST calls need "Authorization: Bearer <Token>" (401 without or with a
// wrong one, 403 when no token is configured) and the leader (503 on a standby).
// With ReadAuth, GET /api/ calls need ReadToken or Token the same way.
// The caller's http.Server should set ReadHeaderTimeout, ReadTimeout,
// WriteTimeout (above a node's wake-up long-poll) and IdleTimeout; bodies
// are bounded here by MaxBodyBytes.
func NewServer(cfg Config) http.Handler {
	if cfg.Queue == nil {
		panic("web.NewServer: Config.Queue is nil")
	}
	cfg = cfg.withDefaults()
	s := &server{cfg: cfg, q: cfg.Queue, log: cfg.Logger}
	if cfg.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(cfg.Token))
	}
	if cfg.ReadToken != "" {
		s.readHash = sha256.Sum256([]byte(cfg.ReadToken))
	}
	if cfg.Metrics != nil {
		cfg.Metrics.WatchQueue(cfg.Queue, cfg.Logger)
		if cfg.IsLeader != nil {
			cfg.Metrics.SetLeaderFunc(cfg.IsLeader)
		}
		cfg.Metrics.WatchWake(cfg.Wake)
	}

	mux := http.NewServeMux()
	assets, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic("web: embedded assets: " + err.Error())
	}
	mux.HandleFunc("GET /{$}", s.dashboard(assets))
	mux.Handle("GET /assets/", noCache(http.StripPrefix("/assets/", http.FileServerFS(assets))))

	mux.HandleFunc("GET /api/nodes", s.reading(s.listNodes))
	mux.HandleFunc("GET /api/stats", s.reading(s.stats))
	mux.HandleFunc("GET /api/jobs", s.reading(s.listJobs))
	mux.HandleFunc("GET /api/jobs/{id}", s.reading(forJob(s.getJob)))
	mux.HandleFunc("GET /api/jobs/{id}/result", s.reading(forJob(s.getResult)))
	mux.HandleFunc("GET /api/jobs/{id}/screenshot", s.reading(forJob(s.getScreenshot)))
	mux.HandleFunc("GET /api/hosts", s.reading(s.listHosts))
	mux.HandleFunc("GET /api/batches/{id}", s.reading(s.batchProgress))
	mux.HandleFunc("GET /api/jobs/{id}/html", s.reading(forJob(s.getHTML)))
	mux.HandleFunc("GET /api/samples", s.reading(s.samples))
	mux.HandleFunc("GET /api/failures", s.reading(s.failures))
	mux.HandleFunc("POST /api/jobs", s.mutating(s.submit))
	mux.HandleFunc("POST /api/jobs/{id}/cancel", s.mutating(forJob(s.cancelJob)))
	mux.HandleFunc("POST /api/jobs/{id}/retry", s.mutating(forJob(s.retryJob)))
	mux.HandleFunc("POST /api/batches/{id}/cancel", s.mutating(s.cancelBatch))
	mux.HandleFunc("POST /api/nodes/{id}/drain", s.mutating(s.drainNode))
	if cfg.Wake != nil {
		mux.HandleFunc("GET "+wake.Route, s.reading(s.wakePoll))
	}
	// Anything else under /api/ gets a JSON 405 or 404, so clients never
	// have to parse the mux's plain-text answers.
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/api/" && pattern != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+" is not allowed; use "+strings.Join(allowed, " or "))
			return
		}
		writeError(w, http.StatusNotFound, "no API endpoint "+r.Method+" "+r.URL.Path)
	})

	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
			ErrorLog:          zap.NewStdLog(cfg.Logger),
			ErrorHandling:     promhttp.ContinueOnError,
			EnableOpenMetrics: false,
		}))
	}
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	return withHeaders(mux)
}

// withHeaders sets the headers every response carries.
func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// noCache makes browsers revalidate the assets, so that a new binary's
// dashboard is what they run.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// dashboardCSP allows only the embedded scripts and styles. Inline styles
// are allowed because uPlot positions its elements with style attributes.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *server) dashboard(assets fs.FS) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, err := fs.ReadFile(assets, "index.html")
		if err != nil {
			s.log.Error("dashboard page missing from the embedded assets", zap.Error(err))
			writeError(w, http.StatusInternalServerError, "dashboard page missing")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", dashboardCSP)
		_, _ = w.Write(page)
	}
}

func (s *server) leader() bool {
	return s.cfg.IsLeader == nil || s.cfg.IsLeader()
}

// healthz answers 200 while the process serves: a liveness check. It does
// not ask the database: restarting the producer mends no database outage
// (and would roll back a migration under way); /readyz reports it.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// readyz answers 200 while the database answers, and says whether this
// producer leads; a load balancer that must reach the leader for mutating
// calls can route on the "leader" field.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	body := map[string]any{"leader": s.leader(), "version": s.cfg.Version}
	if err := s.q.Ping(ctx); err != nil {
		body["ready"] = false
		body["error"] = "database does not answer"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["ready"] = true
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// The client has gone when this fails; there is nobody to tell.
	_ = enc.Encode(v)
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	// Index and Field locate a bad spec in a submitted batch.
	Index *int   `json:"index,omitempty"`
	Field string `json:"field,omitempty"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg})
}

// internalError answers 500 without database details (the read endpoints
// are open to anyone who can reach the port) and logs the cause.
func (s *server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		// The client went away; its answer has nowhere to go.
		return
	}
	s.log.Error("api request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	writeError(w, http.StatusInternalServerError, "internal error (the producer's log has the details)")
}

// queueError answers for an error from the queue: 404 for ErrNotFound, else 500.
func (s *server) queueError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, jobqueue.ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	s.internalError(w, r, err)
}
