package rollback

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/detect"

	"github.com/auditlens/auditlens/store"
)

// Name is the name of the rv-rollback detector.
const Name = "rv-rollback"

// Evidence roles of rv-rollback findings.
const (
	// RoleHeadBefore is the event that showed the highest resourceVersion
	// before the drop.
	RoleHeadBefore = "head-before"
	// RoleHeadAfter is the write that showed the new, lower head: the
	// highest of the writes within a Bucket of the first lower one.
	RoleHeadAfter = "head-after"
	// RoleFutureWatch is a watch or list from a resourceVersion above the
	// new head: a client stuck "in the future" (User is the client,
	// ResourceVersion the requested one).
	RoleFutureWatch = "future-watch"
	// RoleConflict is a write answered 409 Conflict after the drop.
	RoleConflict = "conflict"
	// RoleRelist (declared with heartbeat-loss's roles) is, here, a list
	// (or watch-list) after the drop, or after a restore's jump.
	// RoleChurn is a controller's create or delete of an object after the
	// drop.
	RoleChurn = "churn"
)

// Config holds the rv-rollback detector's parameters. Zero
// fields take the defaults, which hold at real time scales (a restore
// takes the apiserver down for tens of seconds to minutes; the head stays
// below the old one for as long as the snapshot was old: hours or days)
// and in compressed test clusters (snapshots minutes old, a few hundred
// revisions).
type Config struct {
	// Bucket is the time resolution of the head series the engine computes
	// (default 5s).
	Bucket time.Duration
	// MinDrop is the fewest revisions the head must fall by (default 100).
	// HA apiservers' caches lag a few revisions; concurrent writes reach
	// the audit log a few revisions out of order.
	MinDrop uint64
	// Hold is how long the head must stay at least MinDrop below the old
	// one, shown by writes, before the drop is a rollback (default 20s): a
	// write that carried an old object's resourceVersion is no drop, the
	// next writes show the head again — Lease renewals (every 10 s, each
	// carrying the resourceVersion of the one before) and leader elections
	// (every 2 s) do in a healthy cluster. A real restore's lower head
	// stays below for as long as the snapshot's changes took to write (in
	// the e2e run: 300 revisions, 40 s).
	Hold time.Duration
	// MinGap is how long successful writes must have paused between the
	// last that showed the old head and the first that showed the new one
	// (default 1s): a restore stops etcd and restarts every apiserver (in
	// the e2e run 5 s), whereas two sources of resourceVersions mixed under
	// one cluster name alternate without a pause.
	MinGap time.Duration
	// MinWitnesses is the fewest distinct resourceVersions, written by at
	// least two users, that show the lower head during Hold (default 5).
	MinWitnesses int
	// Aftermath is how long after the drop 409 conflicts, relists and
	// controllers' creates and deletes are counted as its consequences
	// (default 15m). Clients stuck in the future are followed for as long
	// as they stay there.
	Aftermath time.Duration
	// MinJump is the fewest revisions the head must jump up by, at once,
	// to be a restore with --bump-revision (default 100000); the jump must
	// also be JumpRatio times what the head grew by, at its usual rate,
	// over the same time (default 20), so that a gap in the feed is no
	// jump.
	MinJump   uint64
	JumpRatio float64
	// MinHerd is the fewest distinct clients that must relist within
	// Aftermath of a jump for it to be reported as a restore (default 3).
	MinHerd int
	// ChurnBy are the user-name prefixes of the controllers whose creates
	// and deletes after the drop are its churn (default
	// system:kube-controller-manager, system:serviceaccount:kube-system:).
	ChurnBy []string
	// Remember is how long a cluster's head and rollback are remembered
	// after they were last seen (default 30 days: a rollback's lower head
	// takes as long as the snapshot was old to catch up).
	Remember time.Duration
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *Config) setDefaults() {
	if c.Bucket < time.Second {
		c.Bucket = 5 * time.Second
	}
	if c.MinDrop == 0 {
		c.MinDrop = 100
	}
	if c.Hold <= 0 {
		c.Hold = 20 * time.Second
	}
	if c.MinGap <= 0 {
		c.MinGap = time.Second
	}
	if c.MinWitnesses <= 0 {
		c.MinWitnesses = 5
	}
	if c.Aftermath <= 0 {
		c.Aftermath = 15 * time.Minute
	}
	if c.MinJump == 0 {
		c.MinJump = 100_000
	}
	if c.JumpRatio <= 0 {
		c.JumpRatio = 20
	}
	if c.MinHerd <= 0 {
		c.MinHerd = 3
	}
	if c.ChurnBy == nil {
		c.ChurnBy = []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:"}
	}
	if c.Remember <= 0 {
		c.Remember = 30 * 24 * time.Hour
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = detect.DefaultMaxEvidence
	}
}

// RVRollback detects a cluster-wide resourceVersion rollback: etcd
// restored from a snapshot without --bump-revision (seed 003).
//
// resourceVersions are etcd revisions, global to the cluster, and only
// grow. After a restore without bump, etcd hands out again the revisions
// it had handed out since the snapshot: new writes reuse resourceVersion
// numbers, clients that hold newer ones watch "from the future" (the
// apiserver accepts the watch with 200 and sends nothing until the new
// head passes it — the 410 or "too large resourceVersion" answers travel
// inside the stream, so the audit log shows 200 either way), kubelets'
// Lease updates get 409 Conflict until they re-read, and controllers with
// stale caches create and delete objects that existed only after the
// snapshot.
//
// What it reads, per Bucket, in the engine: the head — the highest
// resourceVersion that successful writes returned (response_rv, at
// RequestResponse level) or carried as the object's current one
// (objectRef.resourceVersion of a successful update, at Metadata level).
// What clients ask for (watch and list resourceVersions) is their view,
// not the head: after a restore the stuck ones keep asking for the old
// one, and one client may ask for anything. It is read only around a
// drop, to name the clients left in the future.
//
// What it claims, when all of this holds:
//   - the head the cluster had shown (before) is followed by writes whose
//     resourceVersions are at least MinDrop lower (after);
//   - for at least Hold, no write shows the old head again, and at least
//     MinWitnesses distinct lower resourceVersions from two users show the
//     new one.
//
// Severity critical when clients were caught by it: watches or lists
// from resourceVersions above the new head, or 409 Conflicts on updates
// that carried one; warning when none was seen (every client restarted,
// or the policy hides their requests). The finding names the clients in
// the future and for how long, the 409 conflicts and relists, and the
// objects controllers created and deleted in the Aftermath.
//
// A restore with --bump-revision N --mark-compacted makes the head jump
// up instead: clients get 410 Gone and relist. That is no rollback; when
// the jump is at least MinJump and JumpRatio times the usual growth, and
// MinHerd clients relist after it, an info finding says a restore
// happened.
//
// State across windows (EvaluateState): the cluster's head and its
// rollback, so that a drop at a window's edge is measured against the
// head the window before showed, and a rollback whose lower head lasts
// for days stays one finding (its ID hashes the cluster and the
// resourceVersions before and after) while its stuck clients are
// followed.
//
// Evidence roles: "head-before", "head-after", "future-watch",
// "conflict", "relist", "churn".
type RVRollback struct{ cfg Config }

// New returns the detector with cfg's parameters.
func New(cfg Config) *RVRollback {
	cfg.setDefaults()
	return &RVRollback{cfg: cfg}
}

// Name implements Detector.
func (d *RVRollback) Name() string { return Name }

// Config returns the parameters in effect.
func (d *RVRollback) Config() Config { return d.cfg }

// writeVerbs are the verbs whose successful responses show the head.
const writeVerbs = "('create', 'update', 'patch', 'delete', 'deletecollection')"

// headSQL computes, per cluster and bucket, the head (the highest
// resourceVersion successful writes returned or updated from), how many
// distinct ones showed it (summed over users) and the users who wrote.
// Stages of one request share their values and users are grouped, so
// duplicates change nothing that matters and FINAL is not needed. The
// distinct count is uniq, not uniqExact: exact for the hundreds of values
// one user writes in a bucket unless two of their 32-bit hashes collide,
// and over 100M events (41M writes, 81k user-buckets) 7.0 s and 0.6 GB
// instead of 9.0 s and 1.5 GB.
func headSQL(window string) string {
	return `SELECT cluster, b, max(u_head) AS head, sum(u_n) AS head_n, arraySort(groupArray(8)(toString(user))) AS head_users
FROM (
    SELECT cluster, toUnixTimestamp(toStartOfInterval(ts, toIntervalSecond({bucket:UInt32}))) AS b, user,
           max(hv) AS u_head, uniq(hv) AS u_n
    FROM (
        SELECT cluster, ts, user, greatest(toUInt64OrZero(response_rv), if(verb = 'update', toUInt64OrZero(object_rv), 0)) AS hv
        FROM audit_events
        WHERE ` + window + ` AND verb IN ` + writeVerbs + ` AND stage = 'ResponseComplete' AND code >= 200 AND code < 300
    )
    WHERE hv > 0
    GROUP BY cluster, b, user
)
GROUP BY cluster, b
ORDER BY cluster, b`
}

// bucket is one Bucket of a cluster's head series.
type bucket struct {
	Cluster string   `json:"cluster"`
	B       int64    `json:"b"` // start, Unix seconds
	Head    uint64   `json:"head"`
	HeadN   int      `json:"head_n"`
	Users   []string `json:"head_users"`
}

func (b bucket) start() time.Time { return time.Unix(b.B, 0).UTC() }

func (d *RVRollback) selectHeads(ctx context.Context, q detect.Querier, w detect.Window) (map[string][]bucket, error) {
	p := store.Params{"bucket": strconv.FormatInt(int64(d.cfg.Bucket/time.Second), 10)}
	sql := headSQL(detect.WindowParams(w, p))
	out := map[string][]bucket{}
	err := detect.SelectRows(ctx, q, "the resourceVersion head", sql, p, func(b bucket) error {
		out[b.Cluster] = append(out[b.Cluster], b)
		return nil
	})
	for _, bs := range out {
		slices.SortFunc(bs, func(a, b bucket) int { return int(a.B - b.B) })
	}
	return out, err
}

// drop is a rollback the head series shows: the head was Before, and from
// bucket From the writes showed a head at least MinDrop lower.
type drop struct {
	Before     uint64
	BeforeAt   time.Time // bucket that last raised the head
	From       int       // index of the first lower bucket
	NewHeads   []newHead // the new head's running maximum, by bucket
	CaughtUp   time.Time // when a write showed Before again (zero: not in the window)
	Confirmed  bool
	Retracted  bool // the old head came back at once: no rollback
	Witnesses  int
	Users      []string
	continuing bool // the drop happened before the window (remembered)
}

// newHead is the running maximum of the lower head at a bucket's start.
type newHead struct {
	At   time.Time
	Head uint64
}

// headAt returns the new head known at t (the lower bound of what a
// client in the future asks for).
func (d *drop) headAt(t time.Time) uint64 {
	var h uint64
	for _, n := range d.NewHeads {
		if n.At.After(t) {
			break
		}
		h = n.Head
	}
	if h == 0 && len(d.NewHeads) > 0 {
		h = d.NewHeads[0].Head
	}
	return h
}

// jumpedBack reports whether head, at or above the old head at t, came
// at once rather than by the new head's growth: by more than ten times
// what the new head grew by, at its rate so far, since it was last
// raised, and more than MinDrop. Without a rate (one value) it cannot
// tell, and says no.
func (d *drop) jumpedBack(head uint64, t time.Time, bucket time.Duration, minDrop uint64) bool {
	n := len(d.NewHeads)
	if n < 2 {
		return false
	}
	first, last := d.NewHeads[0], d.NewHeads[n-1]
	el := last.At.Sub(first.At).Seconds()
	if el <= 0 || head <= last.Head {
		return false
	}
	expected := float64(last.Head-first.Head) / el * (t.Sub(last.At) + bucket).Seconds()
	return float64(head-last.Head) > 10*expected+float64(minDrop)
}

// passed returns when the new head first reached rv.
func (d *drop) passed(rv uint64) (time.Time, bool) {
	for _, n := range d.NewHeads {
		if n.Head >= rv {
			return n.At, true
		}
	}
	if !d.CaughtUp.IsZero() {
		return d.CaughtUp, true
	}
	return time.Time{}, false
}

// jump is the head jumping up at once: a restore with --bump-revision.
type jump struct {
	Before, After uint64
	BeforeAt      time.Time
	At            int // index of the bucket that jumped
}

// scan walks a cluster's head series from the remembered head top (0:
// none) and the remembered rollback still going on (nil: none), and
// returns the drops (the remembered one first when it goes on) and jumps
// it shows, the drop the series ends too soon to tell (pending), and the
// head the series ends at.
func (d *RVRollback) scan(bs []bucket, top uint64, topAt time.Time, cur *drop) (drops []*drop, jumps []jump, pending *drop, end uint64, endAt time.Time) {
	var first time.Time // where the head's usual growth is measured from
	var firstTop uint64
	if cur != nil {
		drops = append(drops, cur)
	}
	raise := func(v uint64, at time.Time) {
		if v > top {
			top, topAt = v, at
		}
		if firstTop == 0 && top > 0 {
			first, firstTop = at, top
		}
	}
	for i := 0; i < len(bs); i++ {
		b := bs[i]
		t := b.start()
		if cur != nil {
			if b.Head >= cur.Before {
				// A write showed the old head again: the new timeline
				// caught up, growing as a head grows — or the old head is
				// back at once, and the drop was two sources of
				// resourceVersions taking turns, no restore.
				if !cur.continuing && cur.jumpedBack(b.Head, t, d.cfg.Bucket, d.cfg.MinDrop) {
					cur.Retracted = true
				}
				cur.CaughtUp = t
				top, topAt = b.Head, t
				cur = nil
				first, firstTop = t, b.Head
				continue
			}
			if b.Head > 0 {
				n := len(cur.NewHeads)
				if n == 0 || b.Head > cur.NewHeads[n-1].Head {
					cur.NewHeads = append(cur.NewHeads, newHead{At: t, Head: b.Head})
				}
				// A second restore to an older snapshot: a drop from the
				// new head.
				if h := cur.NewHeads[len(cur.NewHeads)-1].Head; b.Head+d.cfg.MinDrop <= h && len(cur.NewHeads) > 1 {
					if nd, _ := d.confirm(bs, i, h); nd != nil {
						nd.BeforeAt = cur.NewHeads[len(cur.NewHeads)-1].At
						cur.CaughtUp = t
						cur = nd
						drops = append(drops, nd)
					}
				}
			}
			continue
		}
		if b.Head > 0 && top > 0 && b.Head+d.cfg.MinDrop <= top {
			nd, ended := d.confirm(bs, i, top)
			if nd != nil {
				nd.BeforeAt = topAt
				cur = nd
				drops = append(drops, nd)
				continue
			}
			if ended && pending == nil {
				// The window ends before the drop could be told: the next
				// evaluation measures it against the same head.
				pending = &drop{Before: top, BeforeAt: topAt, From: i}
			}
			// Not held: an old object's resourceVersion, or too soon to
			// tell; the head stays.
			continue
		}
		// A jump needs the usual growth to compare with, measured over at
		// least Hold.
		if el := topAt.Sub(first); b.Head > 0 && top > 0 && b.Head >= top+d.cfg.MinJump && el >= d.cfg.Hold {
			usual := float64(top-firstTop) / el.Seconds() * (t.Sub(topAt).Seconds() + d.cfg.Bucket.Seconds())
			if float64(b.Head-top) >= d.cfg.JumpRatio*usual {
				jumps = append(jumps, jump{Before: top, After: b.Head, BeforeAt: topAt, At: i})
				top, topAt = b.Head, t
				first, firstTop = t, b.Head
				continue
			}
		}
		raise(b.Head, t)
	}
	return drops, jumps, pending, top, topAt
}

// confirm checks that the head stays at least MinDrop below before from
// bucket i on, for Hold, shown by enough writes; nil when it does not (yet:
// ended reports that the series ended before it could tell).
func (d *RVRollback) confirm(bs []bucket, i int, before uint64) (nd *drop, ended bool) {
	nd = &drop{Before: before, From: i}
	users := map[string]bool{}
	start := bs[i].start()
	var last time.Time
	for j := i; j < len(bs); j++ {
		b := bs[j]
		if b.Head >= before {
			return nil, false
		}
		if b.Head == 0 || b.Head+d.cfg.MinDrop > before {
			continue
		}
		nd.Witnesses += b.HeadN
		for _, u := range b.Users {
			users[u] = true
		}
		last = b.start()
		if n := len(nd.NewHeads); n == 0 || b.Head > nd.NewHeads[n-1].Head {
			nd.NewHeads = append(nd.NewHeads, newHead{At: last, Head: b.Head})
		}
		if last.Sub(start) >= d.cfg.Hold && nd.Witnesses >= d.cfg.MinWitnesses && len(users) >= 2 {
			nd.Confirmed = true
			nd.Users = slices.Sorted(maps.Keys(users))
			// Keep only what the first bucket showed: the scan adds the
			// rest bucket by bucket.
			nd.NewHeads = nd.NewHeads[:1]
			return nd, false
		}
	}
	return nil, true
}
