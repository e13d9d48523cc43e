# main and feature both changed config.ini in the same place.
set -e
commit() {
  export GIT_AUTHOR_DATE="2026-03-0${1}T12:00:00Z" GIT_COMMITTER_DATE="2026-03-0${1}T12:00:00Z"
  git add -A && git commit -q -m "$2"
}
git init -q -b main repo
cd repo
git config user.name "Linus Example"
git config user.email "linus@example.com"
printf '[server]\nhost = 0.0.0.0\nport = 8080\ntimeout = 10\nretries = 1\n\n[log]\nlevel = info\n' > config.ini
printf 'def serve():\n    return "serving"\n' > server.py
commit 1 "Initial config"
git checkout -q -b feature
sed -i 's/^timeout = 10$/timeout = 15/; s/^retries = 1$/retries = 5/' config.ini
printf 'def retry(fn, n):\n    for _ in range(n - 1):\n        try:\n            return fn()\n        except OSError:\n            pass\n    return fn()\n' > retry.py
commit 2 "Retry failed requests"
git checkout -q main
sed -i 's/^timeout = 10$/timeout = 30/; s/^retries = 1$/retries = 2/' config.ini
sed -i 's/^level = info$/level = debug/' config.ini
commit 3 "Raise timeout, log more"
