# A small repository with two commits on main.
set -e
export GIT_AUTHOR_DATE="2026-01-05T10:00:00Z" GIT_COMMITTER_DATE="2026-01-05T10:00:00Z"
git init -q -b main repo
cd repo
git config user.name "Ada Lovelace"
git config user.email "ada@example.com"
printf '# Greeter\n\nA tiny project.\n' > README.md
git add README.md
git commit -q -m "Initial commit"
printf 'print("hi")\n' > app.py
git add app.py
git commit -q -m "Add app"
