(function () {
  var body = document.body;
  var state = document.getElementById('live');
  var wait = new URLSearchParams(location.search).get('wait') || '25';
  function pause(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  function poll() {
    var v = body.getAttribute('data-live');
    return fetch('/version?since=' + encodeURIComponent(v) + '&wait=' + encodeURIComponent(wait), {cache: 'no-store'})
      .then(function (r) { if (!r.ok) { throw new Error('status ' + r.status); } return r.text(); })
      .then(function (now) {
        if (now === v) { return; }
        return fetch('/', {cache: 'no-store'}).then(function (r) { return r.text(); }).then(function (html) {
          var doc = new DOMParser().parseFromString(html, 'text/html');
          var next = doc.querySelector('main');
          if (!next) { return; }
          document.querySelector('main').replaceWith(document.adoptNode(next));
          body.setAttribute('data-live', doc.body.getAttribute('data-live'));
          document.title = doc.title;
          state = document.getElementById('live');
        });
      })
      .then(function () { if (state) { state.textContent = 'live'; } return pause(100); },
            function () { if (state) { state.textContent = 'live: server unreachable, retrying'; } return pause(2000); })
      .then(poll);
  }
  poll();
})();
