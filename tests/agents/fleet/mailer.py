"""Send one receipt over plain smtplib after a step: the zombie worker's mailer (a paused zombie's
SMTP mail is its own attempt's, never the resumer's).

No gate: a resumer sends, the woken zombie sends again (a duplicate, as it should be judged);
what matters is whose each message is.
"""

import os
import smtplib
from email.message import EmailMessage

import killdrill

with killdrill.node("compose"):
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "shop@example.com", "ana@example.com", "Your receipt"
    msg["Message-ID"] = f"<{os.environ['KILLDRILL_THREAD']}-receipt@shop>"
    msg.set_content("Paid 42.00 GBP.")
with killdrill.node("send"):
    host, port = os.environ["KILLDRILL_SMTP"].rsplit(":", 1)
    with smtplib.SMTP(host, int(port), timeout=30) as client:
        client.send_message(msg)
print(os.getpid())
