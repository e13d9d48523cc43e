cd repo
git merge feature || true
git status --short
git show main:config.ini | sed 's/^retries = .*/retries = 5/' > config.ini
cat config.ini
git add config.ini
git -c core.editor=true commit --no-edit
git log --graph --oneline --all
