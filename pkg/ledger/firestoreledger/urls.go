package firestoreledger

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"cloud.google.com/go/firestore"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Scheme is the URL scheme of this backend: firestore://PROJECT[/DATABASE]?prefix=P.
const Scheme = "firestore"

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(OpenURL))
}

// OpenURL opens firestore://PROJECT[/DATABASE]?prefix=P: the project's database (the
// default database when none is named), with collections PREFIX+"runs" and
// PREFIX+"effects". Credentials come from the environment (Application Default
// Credentials), never from the URL; FIRESTORE_EMULATOR_HOST points the client at the
// emulator. The ledger owns its client: Close closes it.
func OpenURL(ctx context.Context, u *url.URL) (ledger.Driver, error) {
	project, database, prefix, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	var client *firestore.Client
	if database == firestore.DefaultDatabaseID {
		client, err = firestore.NewClient(ctx, project)
	} else {
		client, err = firestore.NewClientWithDatabase(ctx, project, database)
	}
	if err != nil {
		return nil, fmt.Errorf("firestoreledger: client for project %q, database %q: %w", project, database, gcpenv.EmulatorHint(err, gcpenv.FirestoreEmulator))
	}
	l, err := New(ctx, client, &Options{Prefix: prefix})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	l.ownsClient = true
	return l, nil
}

func parseURL(u *url.URL) (project, database, prefix string, err error) {
	const form = "firestore://PROJECT[/DATABASE][?prefix=PREFIX]"
	if u.Scheme != Scheme {
		return "", "", "", fmt.Errorf("scheme %q is not %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return "", "", "", fmt.Errorf("%s: credentials come from the environment, never from the URL", form)
	}
	if err := driver.CheckQuery(u, "prefix"); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", form, err)
	}
	if u.Opaque != "" || u.Host == "" || u.Port() != "" {
		return "", "", "", fmt.Errorf("%s: want a project ID as the host", form)
	}
	database = strings.TrimPrefix(u.Path, "/")
	if strings.Contains(database, "/") {
		return "", "", "", fmt.Errorf("%s: %q is not a database ID", form, database)
	}
	if database == "" {
		database = firestore.DefaultDatabaseID
	}
	if v := u.Query()["prefix"]; len(v) > 1 {
		return "", "", "", fmt.Errorf("%s: prefix given %d times", form, len(v))
	}
	return u.Host, database, u.Query().Get("prefix"), nil
}
