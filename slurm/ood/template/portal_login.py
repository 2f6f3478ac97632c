"""The session's login page, accepting the password the portal's Connect button posts to it.

OnDemand's view posts the session password from the dashboard page, which cannot know Jupyter's
_xsrf cookie. A post whose Origin is the portal (ServerApp.allow_origin / allow_origin_pat) needs no
_xsrf: forging it gains nothing without the password. Every other request keeps Jupyter's checks.
"""

from jupyter_server.auth.login import LoginFormHandler


class PortalLoginHandler(LoginFormHandler):
    def check_xsrf_cookie(self):
        # Tornado asks before the user is known; Jupyter's own check defers that call, and so do we.
        user_known = hasattr(self, "_jupyter_current_user")
        posted_by_portal = self.request.method == "POST" and "Origin" in self.request.headers
        if user_known and posted_by_portal and self.check_origin():
            return None
        return super().check_xsrf_cookie()
