package worker

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/oauth2"
	"google.golang.org/api/idtoken"
)

// GoogleIDTokens returns the TokenSource of HTTP targets with auth: oidc: Google ID
// tokens with the target's URL as audience, from the environment's credentials (on
// Cloud Run, the metadata server; elsewhere a service account's Application Default
// Credentials), cached and refreshed per audience.
func GoogleIDTokens() TokenSource {
	var mu sync.Mutex
	sources := map[string]oauth2.TokenSource{}
	return func(ctx context.Context, audience string) (string, error) {
		mu.Lock()
		ts, ok := sources[audience]
		if !ok {
			var err error
			ts, err = idtoken.NewTokenSource(context.WithoutCancel(ctx), audience)
			if err != nil {
				mu.Unlock()
				return "", fmt.Errorf("worker: ID token source for %s: %w", audience, err)
			}
			sources[audience] = ts
		}
		mu.Unlock()
		tok, err := ts.Token()
		if err != nil {
			return "", fmt.Errorf("worker: ID token for %s: %w", audience, err)
		}
		return tok.AccessToken, nil
	}
}
