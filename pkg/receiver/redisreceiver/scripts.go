package redisreceiver

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The store's rules (pkg/receiver/driver) in Lua, each one script run atomically by the
// server, judged by its clock (TIME). Times are µs since the epoch. A key's record is a
// hash (of the fields FIELDS names in lua/common.lua); a run's fence a hash of attempt
// and expire. Every key expires (its PEXPIREAT) at the record's expire_at, rounded up to
// the millisecond, and a record whose expire_at passed is treated as absent meanwhile.
//
// Replies: a record is the array recordFields names, in that order (false for a missing
// field); an error reply "LEASE_LOST ..." is receiver.ErrLeaseLost.

// common is lua/common.lua, the functions every script uses; holds is lua/holds.lua, the
// check of renew, complete and release that the record is in flight under the caller's
// token. Each script is its file under lua/, which says what it takes and answers.
var (
	common = lua("common")
	holds  = lua("holds")

	claimScript    = redis.NewScript(common + lua("claim"))
	renewScript    = redis.NewScript(common + holds + lua("renew"))
	completeScript = redis.NewScript(common + holds + lua("complete"))
	releaseScript  = redis.NewScript(common + holds + lua("release"))
	getScript      = redis.NewScript(common + lua("get"))
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
