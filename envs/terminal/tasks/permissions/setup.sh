# The deploy folder arrives with careless permissions.
mkdir -p deploy/public/css deploy/logs
printf '#!/bin/sh\necho deploying\n' > deploy/run.sh
printf 'sk-test-0000\n' > deploy/secret.key
printf '<h1>hi</h1>\n' > deploy/public/index.html
printf 'h1 { color: red }\n' > deploy/public/css/site.css
chmod 666 deploy/run.sh
chmod 644 deploy/secret.key
chmod 600 deploy/public/index.html deploy/public/css/site.css
chmod 700 deploy/public deploy/public/css
chmod 755 deploy/logs
