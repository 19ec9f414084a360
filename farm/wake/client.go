package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/internal/outage"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// Route is the producer's long-poll endpoint under its base URL, as a
// net/http pattern: the producer's API serves it (farm/web), the client
// fills in its node id.
const Route = "/api/nodes/{id}/wake"

// CheckURL checks a producer's base URL.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not a producer's base URL: want http(s)://host[:port][/prefix]", s)
	}
	return nil
}

// Answer is the endpoint's JSON body.
type Answer struct {
	// Woken: the node got work since its last poll, or may have (this
	// producer did not know the node, or its LISTEN connection was
	// re-established).
	Woken bool `json:"woken"`
}

// ClientConfig configures NewClient. Its durations follow the rule of
// every config struct: 0 means the documented default, a negative value is
// a programming error that NewClient reports by panicking with its name.
type ClientConfig struct {
	// URL is the producer's base URL (http://producer:8080), required.
	URL string
	// Token is the bearer token the producer's reads need (its read token
	// or API token); empty sends none.
	Token string
	// NodeID is the node polled for, required.
	NodeID string
	// Wait is how long one poll may be held open; the producer holds it at
	// most its own MaxWait. 0: DefaultMaxWait.
	Wait time.Duration
	// RetryMin and RetryMax bound the pause after a failed poll, doubling
	// from the first to the second. 0: 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
	// HTTP is the client. Default: one of its own with no overall timeout
	// (each poll is bounded by Wait plus a margin).
	HTTP   *http.Client
	Logger *zap.Logger
	// FallbackPoll is how often the node looks for jobs without wake-ups
	// (its poll interval), which the log names while polls fail; 0: not
	// named.
	FallbackPoll time.Duration
	// Now is the clock of the failure log's reminders; nil: time.Now.
	Now func() time.Time
}

// Client keeps one long-poll open to a producer and turns its answers into
// notifications, as a jobqueue.Listener does for LISTEN: Ready closes after
// the first poll (answered, the node is registered with the hub, so that
// nothing assigned from then on is missed; failed, the node must not wait
// for a producer to claim the jobs it already holds), C carries a
// notification per wake-up, and one with jobqueue.PayloadReconnected once a
// producer answers after polls failed (wake-ups may have been missed
// meanwhile).
type Client struct {
	cfg   ClientConfig
	url   string
	log   *zap.Logger
	ready chan struct{}
	c     chan jobqueue.Notification
}

// NewClient returns a client; call Run to start it.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := errors.Join(
		cfgrule.Resolve("Wait", &cfg.Wait, DefaultMaxWait, false),
		cfgrule.Resolve("RetryMin", &cfg.RetryMin, 100*time.Millisecond, false),
		cfgrule.Resolve("RetryMax", &cfg.RetryMax, 5*time.Second, false),
	); err != nil {
		panic("wake.NewClient: ClientConfig." + err.Error())
	}
	if err := CheckURL(cfg.URL); err != nil {
		return nil, err
	}
	if err := jobqueue.ValidateNodeID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Client{
		cfg:   cfg,
		url:   strings.TrimSuffix(cfg.URL, "/") + strings.Replace(Route, "{id}", url.PathEscape(cfg.NodeID), 1),
		log:   cfg.Logger,
		ready: make(chan struct{}),
		c:     make(chan jobqueue.Notification, 1),
	}, nil
}

// Ready closes once the first poll is answered or has failed.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// C carries the wake-ups; one waiting is as good as many.
func (c *Client) C() <-chan jobqueue.Notification { return c.c }

// Run polls until ctx ends, and returns nil then. While polls fail it
// says so: a refusal (4xx: a wrong URL or token, which does not heal) as an
// error at every retry, any other failure (nothing listening, a producer
// down or restarting, a gateway's error) as a warning at the first and
// then at most once a minute, with how many polls failed for how long; and
// once a producer answers again, how long the outage lasted.
func (c *Client) Run(ctx context.Context) error {
	pause := c.cfg.RetryMin
	// registered: the producer answered the last poll, so it knows the
	// node; after a failure (a restarted producer forgot it, or another
	// behind a load balancer never knew it) the next poll registers again
	// before anything is waited for.
	registered := false
	var out outage.Tracker
	for {
		wait := c.cfg.Wait
		if !registered {
			wait = 0 // answered at once: see Hub.Wait
		}
		woken, err := c.poll(ctx, wait)
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-c.ready:
		default:
			close(c.ready)
		}
		if err != nil {
			retryIn := backoff.Jitter(pause)
			c.failed(&out, err, retryIn)
			registered = false
			if !ctxtime.Sleep(ctx, retryIn) {
				return nil
			}
			pause = min(2*pause, c.cfg.RetryMax)
			continue
		}
		pause = c.cfg.RetryMin
		registered = true
		if out.Failing() {
			// Wake-ups may have been missed while the producer was away.
			failures, lasted, _ := out.Succeed(c.cfg.Now())
			c.log.Info("wake poll answered again", zap.String("url", c.url),
				zap.Int64("failures", failures), zap.Duration("failed_for", lasted))
			c.deliver(jobqueue.Notification{Payload: jobqueue.PayloadReconnected})
		}
		if woken {
			c.deliver(jobqueue.Notification{Channel: jobqueue.ChannelAssigned, Payload: c.cfg.NodeID})
		}
	}
}

// failed logs a failed poll as out says (see Run).
func (c *Client) failed(out *outage.Tracker, err error, retryIn time.Duration) {
	now := c.cfg.Now()
	say := out.Fail(now)
	fields := []zap.Field{zap.String("url", c.url), zap.Error(err), zap.Duration("retry_in", retryIn),
		zap.Int64("failures", out.Failures()), zap.Duration("failing_for", out.For(now))}
	if c.cfg.FallbackPoll > 0 {
		fields = append(fields, zap.Duration("fallback_poll", c.cfg.FallbackPoll))
	}
	var se *statusError
	switch {
	case errors.As(err, &se) && se.code >= 400 && se.code < 500:
		// A wrong URL or token does not heal: say so at every retry, not
		// once (the node works meanwhile, at its fallback poll's latency).
		c.log.Error("wake poll refused: check --wake-url and --wake-token", fields...)
	case say == outage.First:
		c.log.Warn("wake poll failed; retrying, the node looks for jobs at its fallback poll meanwhile", fields...)
	case say == outage.Reminder:
		// A wrong host or port fails like a producer down, and heals no
		// more than a wrong path: never silent for longer than a minute.
		c.log.Warn("wake poll still failing: check --wake-url if this lasts; the node looks for jobs at its fallback poll meanwhile", fields...)
	}
}

// poll makes one request.
func (c *Client) poll(ctx context.Context, wait time.Duration) (bool, error) {
	// The producer answers by wait; the margin covers the network and a
	// busy producer, and a dead one is noticed within it.
	rctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, c.url+"?wait="+wait.String(), nil)
	if err != nil {
		return false, err
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, &statusError{code: resp.StatusCode, msg: resp.Status + ": " + strings.TrimSpace(string(body))}
	}
	var a Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return false, fmt.Errorf("answer %q: %w", body, err)
	}
	return a.Woken, nil
}

// statusError is a poll the producer answered with another status than 200.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func (c *Client) deliver(n jobqueue.Notification) {
	select {
	case c.c <- n:
	default:
		// One is waiting already; the claim it causes answers both.
	}
}
