#!/bin/sh
# Starts headless Chromium with DevTools on 127.0.0.1:9223 and publishes it on 0.0.0.0:9222.
# Chromium's new headless mode ignores --remote-debugging-address (it always binds loopback),
# hence socat. Unless GYMFLEET_BROWSER_NETWORK=1, every host name resolves to nothing and every
# request goes to a dead proxy: the pages (copied under /opt/gymfleet/pages) load from file://.
set -eu
if [ "${GYMFLEET_BROWSER_NETWORK:-0}" = 1 ]; then
  set --
else
  set -- "--host-resolver-rules=MAP * ~NOTFOUND" "--proxy-server=http://127.0.0.1:9" "--proxy-bypass-list=<-loopback>"
fi
chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --disable-dev-shm-usage \
  --remote-debugging-address=0.0.0.0 --remote-debugging-port=9223 \
  --user-data-dir=/tmp/chromium-profile "$@" about:blank &
exec socat TCP-LISTEN:9222,fork,reuseaddr TCP:127.0.0.1:9223
