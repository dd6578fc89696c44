package redisledger

import (
	"embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
)

// The Lua scripts, one per transition, each in its file under lua/. Each runs atomically on the server, reads the
// server's clock with TIME (or takes the caller's Now, for tests), and answers
//
//	{written (0 or 1), now (µs since the epoch), run fields (HGETALL), …}
//
// so that when it wrote nothing the Go side can let the state machine of package ledger
// say why (an idempotent repeat, a lost lease, held until …). Times are stored as decimal
// microseconds since the Unix epoch, "" for zero; Lua's numbers are doubles, exact for
// integers below 2^53 (year 2255 in microseconds).
//
// Keys: KEYS[1] is the run's hash, KEYS[2] the rescue index (a sorted set of live run IDs
// scored by deadline), KEYS[3] the expiry index (a sorted set of "r:RUNID" and
// "e:EFFECTKEY" scored by expire_at); the effect scripts add KEYS[4], the effect's hash.
// A run's history is its hash's field history: one ledger.Event JSON a line, oldest
// first, the latest ledger.MaxHistory kept; the scripts answer a run without it (Get
// reads it). The last ARGV of every script that writes a run is the ledger's key prefix
// P, under which it finds the run's other keys: its effects P.."eff:"..EFFECTKEY, the
// listing indexes P.."list:"..NAME (sorted sets of run IDs scored by created_at or
// updated_at: created, created:status:S, created:job:J, created:ns:N, updated,
// updated:status:S; and id, every run ID scored 0, in the lexicographic order
// ZRANGEBYLEX reads) and P.."names", a hash of each indexed run's job and namespace, by
// which an expired run's entries are found again to drop them.

// prelude is lua/prelude.lua, the functions the scripts share, with its constants filled in.
var prelude = strings.NewReplacer(
	"{MAX_HISTORY}", strconv.Itoa(ledger.MaxHistory),
	"{MAX_TEXT}", strconv.Itoa(ledger.MaxEventText),
).Replace(lua("prelude"))

// operateLua defines operate(), the compare-and-set of a run that the operate and resolve
// scripts share.
var operateLua = lua("operate_fn")

// Each script is its file under lua/, which says what it takes (KEYS, ARGV) and answers,
// after the prelude.
var (
	claimScript          = redis.NewScript(prelude + lua("claim"))
	expediteScript       = redis.NewScript(prelude + lua("expedite"))
	acquireScript        = redis.NewScript(prelude + lua("acquire"))
	renewScript          = redis.NewScript(prelude + lua("renew"))
	finishScript         = redis.NewScript(prelude + lua("finish"))
	releaseScript        = redis.NewScript(prelude + lua("release"))
	rescueScript         = redis.NewScript(prelude + lua("rescue"))
	operateScript        = redis.NewScript(prelude + operateLua + lua("operate"))
	resolveScript        = redis.NewScript(prelude + operateLua + lua("resolve"))
	getScript            = redis.NewScript(prelude + lua("get"))
	listScript           = redis.NewScript(prelude + lua("list"))
	runIDsScript         = redis.NewScript(lua("run_ids"))
	listEffectsScript    = redis.NewScript(lua("list_effects"))
	beginEffectScript    = redis.NewScript(prelude + lua("begin_effect"))
	completeEffectScript = redis.NewScript(prelude + lua("complete_effect"))
	listRescueScript     = redis.NewScript(prelude + lua("list_rescue"))
	sweepScript          = redis.NewScript(prelude + lua("sweep"))
)

//go:embed lua/*.lua
var luaFiles embed.FS

// lua returns the Lua in lua/name.lua without its leading comment lines (its
// documentation).
func lua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // the files are embedded: a missing one is a typo that every test finds
	}
	s := string(b)
	for strings.HasPrefix(s, "--") {
		_, s, _ = strings.Cut(s, "\n")
	}
	return s
}

// scripts are loaded once when the ledger opens (SCRIPT LOAD) and run with EVALSHA; a
// server that lost its script cache (a restart, a failover) gets them again through EVAL.
var scripts = []*redis.Script{
	claimScript, expediteScript, acquireScript, renewScript, finishScript, releaseScript, rescueScript,
	operateScript, resolveScript, getScript, listScript, listEffectsScript,
	beginEffectScript, completeEffectScript, listRescueScript, sweepScript,
}
