chmod 750 deploy/run.sh
chmod 600 deploy/secret.key
find deploy/public -type d -exec chmod 755 {} +
find deploy/public -type f -exec chmod 644 {} +
chmod 1777 deploy/logs
ls -lR deploy
