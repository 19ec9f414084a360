package browser_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testsite"
)

// A session renders a JavaScript page in a fresh browser context: the list
// exists only after the page's script fetched it.
func ExampleSession_Render() {
	ctx := context.Background()
	site, err := testsite.Start(ctx, testsite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer site.Close()

	b, err := browser.Launch(ctx, browser.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Kill()
	s, err := b.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	res, err := s.Render(ctx, browser.Request{
		URL:     site.URL + "/page/5",
		Wait:    browser.Wait{Selector: "#ready"},
		Extract: `document.querySelectorAll('li.item').length`,
		Timeout: 30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Title, string(res.Data))

	_, err = s.Render(ctx, browser.Request{URL: site.URL + "/status/503"})
	fmt.Println(browser.ClassOf(err), browser.IsRetriable(err))
	// Output:
	// 200 Page 5 200
	// http true
}
