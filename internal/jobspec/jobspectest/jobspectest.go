// Package jobspectest holds the tables that jobspec's tests and browser's
// tests share: what jobspec decides, checked against what Chrome does.
package jobspectest

// ExtractCases are extract expressions as users write them (good: modern
// syntax, regular expressions where / could be a division, comments,
// trailing semicolons), and some that cannot run as the one expression an
// extract is (bad). jobspec's TestCheckExtract wants CheckExtract to take
// the good ones and refuse the bad ones; browser's
// TestExtractCheckAgreesWithChrome asks Chrome about both.
func ExtractCases() (good, bad []string) {
	good = []string{
		`document.title`,
		`document.querySelector('h1')?.textContent ?? null`,
		`[...document.querySelectorAll('li.item')].map(e => e.textContent.trim())`,
		`(() => { const out = {}; for (const a of document.links) out[a.href] = a.textContent; return out })()`,
		`(async () => { await new Promise(r => setTimeout(r, 10)); return location.href })()`,
		"`${location.host}/${document.title}`",
		`({title: document.title, n: document.querySelectorAll("li").length})`,
		`JSON.parse(document.querySelector('#data')?.textContent || 'null')`,
		`document.title.replace(/\s+/g, ' ').split(/ \/ /)`,
		`location.pathname.split('/').filter(Boolean)`,
		`1 / 2 / 3`,
		`document.body.innerText.match(/item (\d+)/i)?.[1]`,
		`new (class { get x() { return 1 } })().x`,
		`Object.fromEntries([...document.querySelectorAll('meta[name]')].map(m => [m.name, m.content]))`,
		`Array.from(document.images, i => ({src: i.src, w: i.naturalWidth}))`,
		`document.querySelectorAll('li').length;`,
		"document.title;\n;\r\n",
		`fetch(location.href).then(r => r.status)`,
		`await Promise.resolve(document.title)`,
		`{...{a: 1}, b: 2}`,
		`document.title // the page's title`,
		`/* a comment */ document.title`,
		`(12345678901234567890n * 2n).toString()`,
		`1_000_000`,
		`document.querySelector('a')?.href?.at?.(-1)`,
		`(x => x ** 2)(3)`,
		`[1, 2, 3].findLast(x => x < 3)`,
		`(function* () { yield 1 })().next().value`,
		"String.raw`a\\b`",
		`(() => { try { return JSON.parse('x') } catch { return null } })()`,
		`new (class { #p = 2; static #s = 1; get p() { return #p in this ? this.#p : 0 } })().p`,
		`(globalThis.__x ??= 5, globalThis.__x ||= 6)`,
		`import('data:text/javascript,export default 1').then(m => m.default)`,
		`'a-b'.match(/(?<x>\w)-(?<y>\w)/v)?.groups`,
		`[4 / 2 / 1, /=/.test('='), 'a/b'.split(/\//)]`,
		"document.title\n.toUpperCase()",
		`1); (2`,
		`typeof window.__NEXT_DATA__ === 'object' ? __NEXT_DATA__.props : null`,
		// An "@" that is no decorator.
		`[...document.querySelectorAll('a[href^="mailto:"]')].map(a => a.href.split('@')[1])`,
		`document.body.innerText.match(/@\w+/g) /* handles */`,
		"`@${document.title}`",
		`async function f() { return 1 }`,
	}
	bad = []string{
		`return 1`,
		`1 +`,
		`var x = 1; x`,
		`   `,
		"\t\r\n",
		`let x = 1`,
		`if (document.title) 1`,
		`document.title)`,
		`foo(`,
		`{`,
		`a b`,
		`x => `,
		`const f = () => 1; f()`,
		`document.querySelector('a').textContent =`,
		`/unterminated`,
		"`unterminated ${",
		`class A {}; new A()`,
		// Decorators: esbuild's parser knows them, Chromium 156's does not.
		`@dec class {}`,
		`@a.b() class X { @c m() {} }`,
		`(class { @dec m() {} })`,
	}
	return good, bad
}
